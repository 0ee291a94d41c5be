// Fuzzes the one reader of published plans (convert/plan_decoder.h) and what
// the replan policy does with a decoded plan (FixedPlanOf, then scoring it
// with SimulateFixedPlan). Plans reach the decoder from the store, from
// `pipeplan simulate --plan FILE` and from the worker's watch stream, so a
// malformed one must give INVALID_ARGUMENT, never a crash.
//
// Input: first byte even: a binary Plan; 1 mod 4: a Plan as JSON; 3 mod 4:
// a plan built field by field (stage devices that repeat, schedules and
// chunks that disagree, node_stage out of range, NaN times and factors).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "fuzz_input.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/graph.h"

namespace {

using pipeplan::fuzz::FuzzInput;
namespace v1 = pipeplan::v1;

v1::Plan Structured(FuzzInput& in) {
  v1::Plan p;
  const int stages = in.Int(0, 9);
  for (int s = 0; s < stages; ++s) {
    v1::Stage* st = p.add_stages();
    st->set_index(in.Byte() % 8 == 0 ? in.Int(-1, 9) : s);
    st->set_device_id(in.Byte() % 8 == 0 ? "" : absl::StrCat("d", in.Int(0, 5)));
    st->set_forward_seconds(in.Number());
    st->set_backward_seconds(in.Number());
    st->set_comm_seconds(in.Number());
    st->set_param_bytes(in.Number());
    st->set_activation_bytes(in.Number());
  }
  p.set_schedule(static_cast<v1::Schedule>(in.Int(0, 9)));
  p.set_chunks_per_rank(static_cast<int32_t>(in.Count(4)));
  p.set_microbatches(static_cast<int32_t>(in.Count(12)));
  p.set_comm_model(static_cast<v1::CommModel>(in.Int(0, 2)));
  const int nodes = in.Int(0, 16);
  for (int n = 0; n < nodes; ++n) p.add_node_stage(in.Byte() % 8 == 0 ? in.Int(-2, 12) : n % 4);
  if (in.Byte() % 2) {
    v1::PlanCalibration* c = p.mutable_calibration();
    for (int d = in.Int(0, 4); d > 0; --d) {
      v1::DeviceFactor* f = c->add_devices();
      f->set_device_id(absl::StrCat("d", in.Int(0, 6)));
      f->set_time_factor(in.Number());
      f->set_samples(in.Int(-1, 9));
    }
    if (in.Byte() % 2) c->add_excluded_devices(absl::StrCat("d", in.Int(0, 6)));
  }
  return p;
}

// The policy's path: a cluster of the plan's devices (minus one, now and
// then: an excluded device), a chain graph of the plan's nodes, a score.
void Score(const pipeplan::DecodedPlan& plan, FuzzInput& in) {
  pipeplan::ClusterSpec cluster;
  const int skip = in.Int(0, 8);
  std::set<std::string> seen;
  for (size_t r = 0; r < plan.rank_devices.size(); ++r) {
    if (static_cast<int>(r) == skip || !seen.insert(plan.rank_devices[r]).second) continue;
    cluster.devices.push_back({.id = plan.rank_devices[r],
                               .host = absl::StrCat("h", r % 2),
                               .flops = 1e14,
                               .memory_bytes = 8e10});
  }
  auto built = pipeplan::Cluster::Build(cluster);
  if (!built.ok()) return;
  pipeplan::PlanOptions options{.microbatches = plan.microbatches,
                                .global_batch = in.Int(0, 16),
                                .optimizer_state_multiplier = 2};
  auto fixed = pipeplan::FixedPlanOf(plan, *built, options);
  if (!fixed.ok()) return;
  pipeplan::GraphSpec graph;
  for (size_t n = 0; n < plan.node_stage.size(); ++n) {
    graph.nodes.push_back({.id = absl::StrCat("n", n), .forward_flops = 1e9, .output_bytes = 1e6});
    if (n > 0) graph.edges.push_back({absl::StrCat("n", n - 1), absl::StrCat("n", n)});
  }
  auto g = pipeplan::Graph::Build(graph);
  if (!g.ok()) return;
  (void)pipeplan::SimulateFixedPlan(*g, *built, *fixed);
}

void Read(const v1::Plan& plan, FuzzInput& in) {
  (void)pipeplan::RankOfDevice(plan, "d0");
  absl::StatusOr<pipeplan::DecodedPlan> decoded = pipeplan::DecodePlan(plan);
  if (!decoded.ok()) return;
  (void)decoded->PlannedStages();
  for (const std::string& d : decoded->rank_devices) (void)decoded->RankOf(d);
  Score(*decoded, in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  FuzzInput in(data + 1, size - 1);
  v1::Plan plan;
  if (data[0] % 2 == 0) {
    if (!plan.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    Read(plan, in);
  } else if (data[0] % 4 == 1) {
    if (!pipeplan::ParseJson(std::string(reinterpret_cast<const char*>(data + 1), size - 1), &plan)
             .ok()) {
      return 0;
    }
    Read(plan, in);
  } else {
    plan = Structured(in);
    Read(plan, in);
  }
  return 0;
}
