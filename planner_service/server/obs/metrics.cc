#include "pipeplan/server/obs/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <exception>
#include <tuple>

#include "absl/strings/str_cat.h"

#ifndef PIPEPLAN_VERSION
#define PIPEPLAN_VERSION "unknown"
#endif

namespace pipeplan::server {

struct Metrics::Families {
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Histogram* solve_duration;
  prometheus::Gauge* gap;
  prometheus::Gauge* jobs;
  prometheus::Gauge* workers_active;
  prometheus::Gauge* workers_lost;
  prometheus::Family<prometheus::Gauge>* plan_version;
  prometheus::Family<prometheus::Gauge>* plan_step;
  prometheus::Family<prometheus::Gauge>* plan_bubble;
  prometheus::Gauge* solves_running;
  prometheus::Gauge* solves_queued;
  prometheus::Counter* cache_hits;
  prometheus::Counter* cache_misses;
  prometheus::Family<prometheus::Counter>* replans;
  prometheus::Family<prometheus::Gauge>* calibration_factor;
  prometheus::Family<prometheus::Gauge>* job_step;
  prometheus::Family<prometheus::Gauge>* job_bubble;
  prometheus::Family<prometheus::Gauge>* job_error;
  prometheus::Family<prometheus::Gauge>* replan_error;
  prometheus::Family<prometheus::Counter>* rejected_reports;

  // RPCs, solves, the plan cache, jobs and workers held.
  void AddServiceMetrics(prometheus::Registry& r);
  // Per job: its plan, replans, calibration, measured vs predicted.
  void AddJobMetrics(prometheus::Registry& r);
};

namespace {

prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& r, const char* name,
                                                   const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& r, const char* name,
                                                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

}  // namespace

void Metrics::Families::AddServiceMetrics(prometheus::Registry& r) {
  requests = &CounterFamily(r, "pipeplan_plan_requests_total",
                            "RPCs answered by the planner, by method and status code");
  solve_duration =
      &prometheus::BuildHistogram()
           .Name("pipeplan_solve_duration_seconds")
           .Help("Wall time of MakePlan for solved (not cached) requests")
           .Register(r)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                            0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  gap = &GaugeFamily(r, "pipeplan_solver_gap_ratio",
                     "Proven relative optimality gap of the last solve")
             .Add({});
  jobs = &GaugeFamily(r, "pipeplan_jobs", "Jobs held by the planner").Add({});
  auto& workers = GaugeFamily(r, "pipeplan_workers", "Registered workers by lease state");
  workers_active = &workers.Add({{"state", "active"}});
  workers_lost = &workers.Add({{"state", "lost"}});
  auto& solves = GaugeFamily(r, "pipeplan_solves", "Solves on the solver pool");
  solves_running = &solves.Add({{"state", "running"}});
  solves_queued = &solves.Add({{"state", "queued"}});
  auto& cache = CounterFamily(r, "pipeplan_plan_cache_lookups_total", "Plan request cache lookups");
  cache_hits = &cache.Add({{"result", "hit"}});
  cache_misses = &cache.Add({{"result", "miss"}});
}

void Metrics::Families::AddJobMetrics(prometheus::Registry& r) {
  plan_version = &GaugeFamily(r, "pipeplan_plan_version", "Current plan version per job");
  plan_step = &GaugeFamily(r, "pipeplan_plan_step_seconds",
                           "Predicted step time of each job's current plan");
  plan_bubble = &GaugeFamily(r, "pipeplan_plan_bubble_ratio",
                             "Predicted bubble ratio (idle share) of each job's current plan");
  replans = &CounterFamily(r, "pipeplan_replans_total",
                           "Plan versions published by replanning, by reason "
                           "(calibration, worker_lost, requested)");
  calibration_factor =
      &GaugeFamily(r, "pipeplan_calibration_factor",
                   "Measured compute time / time modelled from the job's cluster, per device");
  job_step = &GaugeFamily(r, "pipeplan_job_step_seconds",
                          "Step time of a job's current plan: kind=measured (median makespan "
                          "over the reported steps) or predicted (calibrated, as run)");
  job_bubble = &GaugeFamily(r, "pipeplan_job_bubble_ratio",
                            "Idle share of the ranks over the step, measured or predicted");
  job_error = &GaugeFamily(r, "pipeplan_job_prediction_error_ratio",
                           "|predicted - measured| / measured step time of a job's plan");
  replan_error = &GaugeFamily(r, "pipeplan_replan_prediction_error",
                              "|predicted - measured| / measured step time of a job's current "
                              "version, predicted before it ran (under the previous version's "
                              "calibration)");
  rejected_reports =
      &CounterFamily(r, "pipeplan_rejected_reports_total",
                     "Step reports refused for a non-finite, negative or absurd timing, by field");
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()), f_(new Families) {
  f_->AddServiceMetrics(*registry_);
  f_->AddJobMetrics(*registry_);
  GaugeFamily(*registry_, "pipeplan_build_info", "Build information; always 1")
      .Add({{"version", PIPEPLAN_VERSION}})
      .Set(1);
}

Metrics::~Metrics() = default;

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(const std::string& listen) {
  std::unique_ptr<Metrics> m(new Metrics());
  if (listen.empty()) return m;
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what(), " (address in use?)"));
  }
  m->exposer_->RegisterCollectable(m->registry_);
  auto ports = m->exposer_->GetListeningPorts();
  m->port_ = ports.empty() ? 0 : ports.front();
  m->address_ = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", m->port_);
  return m;
}

void Metrics::CountRequest(std::string_view method, std::string_view code) {
  prometheus::Counter* c;
  {
    absl::MutexLock l(&mu_);
    auto key = std::make_pair(std::string(method), std::string(code));
    auto it = requests_.find(key);
    if (it == requests_.end()) {
      c = &f_->requests->Add({{"method", key.first}, {"code", key.second}});
      requests_.emplace(std::move(key), c);
    } else {
      c = it->second;
    }
  }
  c->Increment();
}

void Metrics::ObserveSolve(double seconds, double gap) {
  f_->solve_duration->Observe(seconds);
  f_->gap->Set(gap);
}

void Metrics::SetJobs(int jobs) { f_->jobs->Set(jobs); }

void Metrics::SetWorkers(int active, int lost) {
  f_->workers_active->Set(active);
  f_->workers_lost->Set(lost);
}

void Metrics::SetPlan(const std::string& job_id, int64_t version, double step_seconds,
                      double bubble_ratio) {
  absl::MutexLock l(&mu_);
  auto it = plans_.find(job_id);
  if (it == plans_.end()) {
    const std::map<std::string, std::string> labels = {{"job", job_id}};
    it =
        plans_
            .emplace(job_id, PlanGauges{&f_->plan_version->Add(labels), &f_->plan_step->Add(labels),
                                        &f_->plan_bubble->Add(labels)})
            .first;
  }
  it->second.version->Set(static_cast<double>(version));
  it->second.step->Set(step_seconds);
  it->second.bubble->Set(bubble_ratio);
}

void Metrics::SetJobObservation(const std::string& job_id, const JobFigures& figures) {
  absl::MutexLock l(&mu_);
  // Clang analyses the lambda on its own: it says it runs under mu_.
  auto set = [&](prometheus::Family<prometheus::Gauge>* family, const std::string& kind,
                 double value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto key = std::make_tuple(job_id, family, kind);
    auto it = job_gauges_.find(key);
    if (it == job_gauges_.end()) {
      prometheus::Labels labels = {{"job", job_id}};
      if (!kind.empty()) labels["kind"] = kind;
      it = job_gauges_.emplace(key, &family->Add(labels)).first;
    }
    it->second->Set(value);
  };
  if (figures.measured_step_seconds > 0) {
    set(f_->job_step, "measured", figures.measured_step_seconds);
    set(f_->job_bubble, "measured", figures.measured_bubble_ratio);
    set(f_->job_error, "", figures.prediction_error_ratio);
  }
  set(f_->job_step, "predicted", figures.predicted_step_seconds);
  set(f_->job_bubble, "predicted", figures.predicted_bubble_ratio);
  if (figures.replan_prediction_error >= 0) {
    set(f_->replan_error, "", figures.replan_prediction_error);
  }
}

void Metrics::CountRejectedReport(std::string_view field) {
  prometheus::Counter* c;
  {
    absl::MutexLock l(&mu_);
    auto it = rejected_.find(std::string(field));
    if (it == rejected_.end()) {
      it = rejected_
               .emplace(std::string(field),
                        &f_->rejected_reports->Add({{"field", std::string(field)}}))
               .first;
    }
    c = it->second;
  }
  c->Increment();
}

void Metrics::RemoveJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  for (auto g = job_gauges_.begin(); g != job_gauges_.end();) {
    if (std::get<0>(g->first) == job_id) {
      std::get<1>(g->first)->Remove(g->second);
      g = job_gauges_.erase(g);
    } else {
      ++g;
    }
  }
  for (auto f = factors_.lower_bound({job_id, ""});
       f != factors_.end() && f->first.first == job_id;) {
    f_->calibration_factor->Remove(f->second);
    f = factors_.erase(f);
  }
  auto it = plans_.find(job_id);
  if (it == plans_.end()) return;
  f_->plan_version->Remove(it->second.version);
  f_->plan_step->Remove(it->second.step);
  f_->plan_bubble->Remove(it->second.bubble);
  plans_.erase(it);
}

void Metrics::SetSolves(int running, int queued) {
  f_->solves_running->Set(running);
  f_->solves_queued->Set(queued);
}

void Metrics::CountReplan(std::string_view reason) {
  prometheus::Counter* c;
  {
    absl::MutexLock l(&mu_);
    auto it = replans_.find(std::string(reason));
    if (it == replans_.end()) {
      it = replans_
               .emplace(std::string(reason), &f_->replans->Add({{"reason", std::string(reason)}}))
               .first;
    }
    c = it->second;
  }
  c->Increment();
}

void Metrics::SetCalibrationFactor(const std::string& job_id, const std::string& device_id,
                                   double factor) {
  absl::MutexLock l(&mu_);
  auto key = std::make_pair(job_id, device_id);
  auto it = factors_.find(key);
  if (it == factors_.end()) {
    it = factors_
             .emplace(key, &f_->calibration_factor->Add({{"job", job_id}, {"device", device_id}}))
             .first;
  }
  it->second->Set(factor);
}

void Metrics::CountCache(bool hit) { (hit ? f_->cache_hits : f_->cache_misses)->Increment(); }

}  // namespace pipeplan::server
