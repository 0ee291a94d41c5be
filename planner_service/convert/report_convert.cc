#include "pipeplan/convert/report_convert.h"

#include "pipeplan/common/status_macros.h"

namespace pipeplan {

StepSample StepSampleFromProto(const v1::ReportStepRequest& r, const std::string& device_id) {
  StepSample s{.worker_id = r.worker_id(),
               .device_id = device_id,
               .step = r.step(),
               .timings = {},
               .rank = r.rank(),
               .replica = r.replica(),
               .start_unix_us = r.start_unix_us(),
               .step_seconds = r.step_seconds(),
               .compute_seconds = r.compute_seconds(),
               .comm_seconds = r.comm_seconds(),
               .bubble_ratio = r.bubble_ratio(),
               .peak_memory_bytes = r.peak_memory_bytes(),
               .optimizer_seconds = r.optimizer_seconds()};
  if (r.has_allreduce_exposed_seconds())
    s.allreduce_exposed_seconds = r.allreduce_exposed_seconds();
  if (r.has_allreduce_probe_seconds()) {
    s.allreduce_probe_seconds = r.allreduce_probe_seconds();
    s.allreduce_probe_bytes = r.allreduce_probe_bytes();
  }
  if (r.has_cpu_use()) {
    s.cpu_pool = r.cpu_use().pool();
    s.cpu_pool_cpus = r.cpu_use().cpus();
    s.compute_threads = r.cpu_use().threads();
  }
  s.weight_pass_repeats_backward = r.weight_pass_repeats_backward();
  s.timings.reserve(r.timings_size());
  for (const v1::ActionTiming& t : r.timings()) {
    s.timings.push_back({.action = t.action(),
                         .seconds = t.seconds(),
                         .start_seconds = t.start_seconds(),
                         .bytes = t.bytes(),
                         .post_unix_us = t.post_unix_us(),
                         .complete_unix_us = t.complete_unix_us(),
                         .wait_seconds = t.wait_seconds()});
  }
  return s;
}

v1::LinkFit LinkFitToProto(const FittedLink& link) {
  v1::LinkFit out;
  out.set_src_device(link.src_device);
  out.set_dst_device(link.dst_device);
  out.set_scope(std::string(LinkScopeName(link.scope)));
  out.set_latency_seconds(link.latency);
  out.set_bandwidth_bytes_per_second(link.bandwidth);
  out.set_samples(link.samples);
  out.set_tail_seconds(link.tail);
  return out;
}

absl::StatusOr<FittedLink> LinkFitFromProto(const v1::LinkFit& link) {
  PIPEPLAN_ASSIGN_OR_RETURN(LinkScope scope, ParseLinkScope(link.scope()));
  return FittedLink{.scope = scope,
                    .src_device = link.src_device(),
                    .dst_device = link.dst_device(),
                    .latency = link.latency_seconds(),
                    .bandwidth = link.bandwidth_bytes_per_second(),
                    .samples = link.samples(),
                    .tail = link.tail_seconds()};
}

}  // namespace pipeplan
