// ReplanPolicy with a fake clock, an in-memory store and fake step reports.
#include "pipeplan/server/replan/replan_policy.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "contingency_plans.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/obs/metrics.h"
#include "pipeplan/server/replan/job_observer.h"
#include "support/plan_requests.h"

namespace pipeplan::server {
namespace {

// The uniform 16-node chain on 4 devices (every stage gets 4 nodes when
// memory allows).
v1::PlanRequest ChainRequest(double memory_bytes = 80e9, double param_bytes = 1e6) {
  return ::pipeplan::testing::UniformChainRequest(
      {.param_bytes = param_bytes, .memory_bytes = memory_bytes});
}

int NodesOn(const v1::Plan& plan, const std::string& device) {
  int n = 0;
  for (const v1::Stage& s : plan.stages()) n += s.device_id() == device ? s.num_nodes() : 0;
  return n;
}

// A report's compute (F and B) seconds: its step time when nothing waits.
double StepSecondsOf(const v1::ReportStepRequest& r) {
  double out = 0;
  for (const auto& t : r.timings()) {
    if (t.action().find("SEND") == std::string::npos) out += t.seconds();
  }
  return out;
}

// The pause a worker reports with its first step of a version.
struct Pause {
  double seconds = 0;
  double compile_wait_seconds = 0;
};

class ReplanPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogEnabled(false); }
  void TearDown() override {
    pool_.reset();
    SetLogEnabled(true);
  }

  void Start(ReplanPolicyOptions o, v1::PlanRequest request = ChainRequest()) {
    store_ = NewMemoryStore();
    auto m = Metrics::Create("");
    ASSERT_TRUE(m.ok());
    metrics_ = std::move(*m);
    registry_ = std::make_unique<JobRegistry>(
        store_.get(), &clock_, JobRegistry::Options{.lease = absl::Seconds(10)}, metrics_.get());
    pool_ = std::make_unique<SolvePool>(2, 16);
    policy_ =
        std::make_unique<ReplanPolicy>(registry_.get(), pool_.get(), &clock_, o, metrics_.get());
    auto in = PlanInputs::FromRequest(request);
    ASSERT_TRUE(in.ok()) << in.status();
    auto plan = MakePlan(*in->graph, *in->cluster, in->options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto job = registry_->CreateJob("j", request, PlanToProto(*in->graph, *in->cluster, *plan));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = job->id();
    for (int d = 0; d < 4; ++d) {
      v1::WorkerInfo w;
      w.set_worker_id(absl::StrCat("w", d));
      w.set_device_id(absl::StrCat("gpu", d));
      ASSERT_TRUE(registry_->RegisterWorker(job_, w).ok());
    }
    policy_->Tick();  // sees version 1 before any report
    ASSERT_TRUE(pool_->WaitIdle(absl::Seconds(30)));
  }

  v1::VersionedPlan Current() {
    auto vp = registry_->GetPlan(job_, 0);
    EXPECT_TRUE(vp.ok());
    return *vp;
  }

  // `steps` steps of every live worker on the current version; `truth`: each
  // device's real time relative to the request's cluster (what a synthetic
  // worker with --slowdown does).
  // Each report's step time is its compute times (1 +- `step_noise`), one
  // draw per step: the spread of whole steps the noise gate reads.
  void Report(int steps, std::map<std::string, double> truth, double noise = 0.02,
              std::vector<std::string> skip = {}, Pause pause = Pause(), double step_noise = 0) {
    const v1::VersionedPlan vp = Current();
    std::map<std::string, double> plan_factor;
    for (const auto& f : vp.plan().calibration().devices()) {
      plan_factor[f.device_id()] = f.time_factor();
    }
    std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
    std::uniform_real_distribution<double> step_jitter(1 - step_noise, 1 + step_noise);
    for (int i = 0; i < steps; ++i, ++step_) {
      const double step_factor = step_jitter(rng_);
      for (int d = 0; d < 4; ++d) {
        const std::string worker = absl::StrCat("w", d), device = absl::StrCat("gpu", d);
        if (std::find(skip.begin(), skip.end(), worker) != skip.end()) continue;
        v1::ReportStepRequest r;
        r.set_job_id(job_);
        r.set_worker_id(worker);
        r.set_step(step_);
        r.set_plan_version(vp.version());
        r.set_rank(d);
        r.set_start_unix_us(int64_t{1'700'000'000'000'000} + step_ * 1'000'000);
        if (i == 0) {
          r.set_switch_seconds(pause.seconds);
          r.set_switch_compile_wait_seconds(pause.compile_wait_seconds);
        }
        for (int s = 0; s < vp.plan().stages_size(); ++s) {
          const v1::Stage& st = vp.plan().stages(s);
          if (st.device_id() != device) continue;
          const double pf = plan_factor.contains(device) ? plan_factor[device] : 1.0;
          const double t = truth.contains(device) ? truth[device] : 1.0;
          for (int mb = 0; mb < vp.plan().microbatches(); ++mb) {
            auto* f = r.add_timings();
            f->set_action(absl::StrCat(s, "F", mb));
            f->set_seconds(st.forward_seconds() / pf * t * jitter(rng_));
            auto* b = r.add_timings();
            b->set_action(absl::StrCat(s, "B", mb));
            b->set_seconds(st.backward_seconds() / pf * t * jitter(rng_));
            auto* send = r.add_timings();
            send->set_action(absl::StrCat(s, "SEND_F", mb));
            send->set_seconds(0.5);
          }
        }
        r.set_step_seconds(StepSecondsOf(r) * step_factor);
        ASSERT_TRUE(registry_->ReportStep(r).ok());
      }
    }
  }

  // Tick, then wait for the evaluations it submitted.
  int TickAndWait() {
    const int n = policy_->Tick();
    EXPECT_TRUE(pool_->WaitIdle(absl::Seconds(60)));
    return n;
  }

  std::string MetricsText() {
    return prometheus::TextSerializer().Serialize(metrics_->registry().Collect());
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<JobRegistry> registry_;
  std::unique_ptr<SolvePool> pool_;
  std::unique_ptr<ReplanPolicy> policy_;
  std::string job_;
  int64_t step_ = 0;
  std::mt19937 rng_{42};
};

ReplanPolicyOptions Fast() {
  ReplanPolicyOptions o;
  o.min_gain = 0.05;
  o.min_interval = absl::Seconds(10);
  o.min_steps = 3;
  o.warmup_steps = 1;
  return o;
}

TEST_F(ReplanPolicyTest, StragglerIsPublishedOnceWithLessWork) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  const v1::VersionedPlan v1 = Current();
  ASSERT_EQ(NodesOn(v1.plan(), "gpu2"), 4);
  Report(6, {{"gpu2", 2.0}});
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v2 = Current();
  ASSERT_EQ(v2.version(), 2);
  EXPECT_NE(v2.reason().find("calibration: device gpu2 is 2.0x slower than modelled"),
            std::string::npos)
      << v2.reason();
  EXPECT_LT(NodesOn(v2.plan(), "gpu2"), 4);
  // The stored request is the job's, unchanged; the calibration is on the plan.
  EXPECT_EQ(v2.request().SerializeAsString(), v1.request().SerializeAsString());
  ASSERT_EQ(v2.plan().calibration().devices_size(), 4);
  for (const auto& f : v2.plan().calibration().devices()) {
    EXPECT_NEAR(f.time_factor(), f.device_id() == "gpu2" ? 2.0 : 1.0, 0.05) << f.device_id();
    EXPECT_GE(f.samples(), 3);
  }
  EXPECT_GT(v2.plan().calibration().previous_step_seconds(),
            1.05 * v2.plan().calibration().step_seconds());
  // gpu2's stage at its calibrated speed is shorter than its old stage was.
  double old_seconds = 0, new_seconds = 0;
  for (const auto& s : v1.plan().stages()) {
    if (s.device_id() == "gpu2") old_seconds = 2.0 * (s.forward_seconds() + s.backward_seconds());
  }
  for (const auto& s : v2.plan().stages()) {
    if (s.device_id() == "gpu2") new_seconds = s.forward_seconds() + s.backward_seconds();
  }
  EXPECT_LT(new_seconds, old_seconds);

  // The same truth under version 2: nothing better to publish.
  EXPECT_EQ(TickAndWait(), 0);  // sees version 2; the interval has not passed
  Report(6, {{"gpu2", 2.0}});
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(TickAndWait(), 1);
  EXPECT_EQ(Current().version(), 2);
  const std::string text = MetricsText();
  EXPECT_NE(text.find("pipeplan_replans_total{reason=\"calibration\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("pipeplan_calibration_factor{device=\"gpu2\",job=\"" + job_ + "\"} "),
            std::string::npos)
      << text;
  // Deleting the job drops its factor gauges.
  ASSERT_TRUE(registry_->DeleteJob(job_).ok());
  policy_->Tick();
  EXPECT_EQ(MetricsText().find("pipeplan_calibration_factor{"), std::string::npos);
}

TEST_F(ReplanPolicyTest, NoiseDoesNotReplan) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(8, {}, /*noise=*/0.10);
  EXPECT_EQ(TickAndWait(), 1);  // evaluated
  EXPECT_EQ(Current().version(), 1);
}

// The prediction of version 2 is stored with it before it runs: under
// version 1's calibration, with the spread's p50/p90 and what version 1
// measured; once version 2 has steps, the observer scores it out of sample
// and the gauge shows it.
TEST_F(ReplanPolicyTest, StoresThePredictionAndScoresItOutOfSample) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(6, {{"gpu2", 2.0}}, 0.05);
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v2 = Current();
  ASSERT_EQ(v2.version(), 2);
  ASSERT_TRUE(v2.has_prediction());
  const v1::VersionPrediction& p = v2.prediction();
  EXPECT_EQ(p.calibrated_on_version(), 1);
  EXPECT_EQ(p.trigger(), "calibration");
  EXPECT_GT(p.step_seconds(), 0);
  EXPECT_NEAR(p.step_seconds(), v2.plan().calibration().step_seconds(), 0.1 * p.step_seconds());
  EXPECT_GT(p.p50_step_seconds(), 0);
  EXPECT_GE(p.p90_step_seconds(), p.p50_step_seconds());
  EXPECT_GT(p.previous_predicted_step_seconds(), p.step_seconds());
  EXPECT_EQ(p.previous_measured_steps(), 5);  // 6 steps less the warm-up
  EXPECT_GT(p.previous_measured_step_seconds(), 0);

  Report(6, {{"gpu2", 2.0}}, 0.05);
  absl::StatusOr<v1::JobObservation> seen = ObserveJob(*registry_, job_);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->out_of_sample_step_seconds(), p.step_seconds());
  EXPECT_NEAR(
      seen->out_of_sample_error_ratio(),
      std::abs(p.step_seconds() - seen->measured_step_seconds()) / seen->measured_step_seconds(),
      1e-12);
  EXPECT_GE(seen->measured_p90_step_seconds(), seen->measured_p50_step_seconds());
  metrics_->SetJobObservation(job_, JobFiguresOf(*seen));
  EXPECT_NE(MetricsText().find("pipeplan_replan_prediction_error{job=\"" + job_ + "\"}"),
            std::string::npos);
}

// The per-action spread misses what moves whole steps (a worker's CPU
// share, the update tail): steps that vary +-15% as a whole, on actions that
// vary +-2%, give a prediction whose p90 stands that far above its p50, not
// the 1-2% the actions alone would.
TEST_F(ReplanPolicyTest, TheSpreadOfWholeStepsWidensThePredictedP90) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(12, {{"gpu2", 2.0}}, 0.02, {}, Pause(), /*step_noise=*/0.15);
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v2 = Current();
  ASSERT_EQ(v2.version(), 2);
  const v1::VersionPrediction& p = v2.prediction();
  ASSERT_GT(p.p50_step_seconds(), 0);
  const double predicted = (p.p90_step_seconds() - p.p50_step_seconds()) / p.p50_step_seconds();
  EXPECT_GT(predicted, 0.5 * p.previous_noise_ratio()) << predicted;
  EXPECT_GT(p.previous_noise_ratio(), 0.05);
}

// A gain the measured step noise could produce does not replan: a 1.5x
// straggler gains ~17%, but steps that vary by +-60% cannot show it
// (TheSameGainOnQuietStepsReplans: without the noise it does).
TEST_F(ReplanPolicyTest, AGainWithinTheStepNoiseDoesNotReplan) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(12, {{"gpu2", 1.5}}, 0.02, {}, Pause(), /*step_noise=*/0.6);
  auto noisy = policy_->Evaluate(job_, ReplanTrigger::kCalibration);
  ASSERT_TRUE(noisy.ok()) << noisy.status();
  EXPECT_FALSE(noisy->published);
  EXPECT_NE(noisy->reason.find("within the measured noise"), std::string::npos) << noisy->reason;
}

TEST_F(ReplanPolicyTest, TheSameGainOnQuietStepsReplans) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(12, {{"gpu2", 1.5}}, 0.02, {}, Pause(), /*step_noise=*/0.0);
  auto quiet = policy_->Evaluate(job_, ReplanTrigger::kCalibration);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_TRUE(quiet->published) << quiet->reason;
}

// Workers that train to the job's end finish one by one: the first DONE one
// leaves its device without a live worker for a moment. A replan then would
// plan over the others and publish a smaller plan nobody trains on (the
// current one, missing a device, scores as infeasible: any plan "gains").
TEST_F(ReplanPolicyTest, AFinishingJobIsNotReplanned) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(8, {{"gpu2", 2.0}});
  v1::FinishWorkerRequest done;
  done.set_job_id(job_);
  done.set_worker_id("w0");
  done.set_step(step_);
  ASSERT_TRUE(registry_->FinishWorker(done).ok());
  for (ReplanTrigger trigger : {ReplanTrigger::kCalibration, ReplanTrigger::kWorkerLost}) {
    auto outcome = policy_->Evaluate(job_, trigger);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_FALSE(outcome->published);
    EXPECT_NE(outcome->reason.find("worker w0 finished training at step 8: the job is ending"),
              std::string::npos)
        << outcome->reason;
  }
  EXPECT_EQ(Current().version(), 1);
}

TEST_F(ReplanPolicyTest, RespectsMinGain) {
  ReplanPolicyOptions o = Fast();
  o.min_gain = 0.9;  // the straggler plan gains ~40%: not enough
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Report(6, {{"gpu2", 2.0}});
  EXPECT_EQ(TickAndWait(), 1);
  EXPECT_EQ(Current().version(), 1);
}

TEST_F(ReplanPolicyTest, AbsoluteFloorBlocksASmallGain) {
  ReplanPolicyOptions o = Fast();
  o.min_gain_seconds = 1e3;  // the straggler plan gains ~40%, far below 1000 s
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Report(6, {{"gpu2", 2.0}});
  auto outcome = policy_->Evaluate(job_, ReplanTrigger::kCalibration);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->published);
  EXPECT_GT(outcome->current_step_seconds, 1.05 * outcome->new_step_seconds);
  EXPECT_NE(outcome->reason.find("per step is not above"), std::string::npos) << outcome->reason;
  EXPECT_EQ(Current().version(), 1);
}

TEST_F(ReplanPolicyTest, TheReportedPauseLessCompileWaitIsTheSwitchCost) {
  ReplanPolicyOptions o = Fast();
  o.horizon_steps = 1;  // the switch must pay for itself within one step
  ASSERT_NO_FATAL_FAILURE(Start(o));
  // 1000 s pauses, all of it but 1 ms spent compiling (which a planned
  // switch does in the background): the floor stays at min_gain_seconds.
  Report(6, {{"gpu2", 2.0}}, 0.02, {}, {.seconds = 1000, .compile_wait_seconds = 1000 - 1e-3});
  auto outcome = policy_->Evaluate(job_, ReplanTrigger::kCalibration);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(outcome->published) << outcome->reason;
}

TEST_F(ReplanPolicyTest, ALongReportedPauseBlocksASwitchThatWouldNotPayBack) {
  ReplanPolicyOptions o = Fast();
  o.horizon_steps = 1;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Report(6, {{"gpu2", 2.0}}, 0.02, {}, {.seconds = 1000});
  auto outcome = policy_->Evaluate(job_, ReplanTrigger::kCalibration);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->published);
  EXPECT_NE(outcome->reason.find("a 1e+03 s switch over 1 steps"), std::string::npos)
      << outcome->reason;
}

TEST_F(ReplanPolicyTest, WaitsForMinStepsAndMinInterval) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(3, {{"gpu2", 2.0}});  // warm-up + 2 < 1 + 3
  EXPECT_EQ(TickAndWait(), 0);
  Report(1, {{"gpu2", 2.0}});
  // Evaluate directly (bypassing Tick's interval): enough data now.
  auto direct = policy_->Evaluate(job_, ReplanTrigger::kCalibration);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_TRUE(direct->published) << direct->reason;
  EXPECT_EQ(Current().version(), 2);
  EXPECT_EQ(TickAndWait(), 0);  // sees version 2, no reports of it yet

  // Version 2: within the interval after a Tick evaluation nothing is submitted.
  Report(6, {{"gpu2", 2.0}, {"gpu0", 1.0}});
  EXPECT_EQ(TickAndWait(), 1);                // first evaluation of the job by Tick
  Report(8, {{"gpu2", 2.0}, {"gpu0", 3.0}});  // gpu0 degrades
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(TickAndWait(), 0);  // 5 s < 10 s
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v3 = Current();
  EXPECT_EQ(v3.version(), 3);
  EXPECT_NE(v3.reason().find("device gpu0"), std::string::npos) << v3.reason();
}

TEST_F(ReplanPolicyTest, LostWorkerTriggersReplanWithoutItsDevice) {
  ASSERT_NO_FATAL_FAILURE(Start(Fast()));
  Report(2, {});
  // w3 stops reporting; the others keep their leases.
  clock_.Advance(absl::Seconds(6));
  Report(1, {}, 0.02, {"w3"});
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v2 = Current();
  ASSERT_EQ(v2.version(), 2);
  EXPECT_EQ(v2.reason().substr(0, 25), "worker w3 lost (device gp") << v2.reason();
  EXPECT_EQ(NodesOn(v2.plan(), "gpu3"), 0);
  EXPECT_EQ(v2.plan().stages_size(), 3);
  ASSERT_EQ(v2.plan().calibration().excluded_devices_size(), 1);
  EXPECT_EQ(v2.plan().calibration().excluded_devices(0), "gpu3");
  // The job's request still has the device (the worker may come back).
  EXPECT_EQ(v2.request().cluster().devices_size(), 4);
  EXPECT_NE(MetricsText().find("pipeplan_replans_total{reason=\"worker_lost\"} 1"),
            std::string::npos);
  // Done: the lost worker has no stage any more.
  EXPECT_EQ(TickAndWait(), 0);
  EXPECT_EQ(Current().version(), 2);
  // Another loss evaluated after a survivor missed a lease and came back
  // finds only w3, which version 2 left out: nothing to publish.
  auto again = policy_->Evaluate(job_, ReplanTrigger::kWorkerLost);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->published);
  EXPECT_EQ(again->reason, "no lost worker has a rank in the current version");
  EXPECT_EQ(Current().version(), 2);
}

TEST_F(ReplanPolicyTest, LostWorkerWithoutAFittingPlanKeepsTheCurrentOne) {
  // Each device holds at most 5 nodes' parameters (+ grads): 16 nodes need 4.
  ASSERT_NO_FATAL_FAILURE(Start(Fast(), ChainRequest(/*memory_bytes=*/11e9, /*param_bytes=*/1e9)));
  clock_.Advance(absl::Seconds(6));
  Report(1, {}, 0.02, {"w1"});
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(TickAndWait(), 1);
  EXPECT_EQ(Current().version(), 1);
  // Not retried for the same version and the same lost device.
  EXPECT_EQ(TickAndWait(), 0);
  auto direct = policy_->Evaluate(job_, ReplanTrigger::kWorkerLost);
  ASSERT_TRUE(direct.ok());
  EXPECT_FALSE(direct->published);
  EXPECT_NE(direct->reason.find("no plan"), std::string::npos) << direct->reason;
}

TEST_F(ReplanPolicyTest, MembershipOnlyReplansForALostWorkerNotForASlowDevice) {
  ReplanPolicyOptions o = Fast();
  o.calibrate = false;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Report(6, {{"gpu2", 2.0}});
  EXPECT_EQ(TickAndWait(), 0);
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(TickAndWait(), 0);
  EXPECT_EQ(Current().version(), 1);
  // w3 stops reporting: that still replans.
  clock_.Advance(absl::Seconds(6));
  Report(1, {{"gpu2", 2.0}}, 0.02, {"w3"});
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(TickAndWait(), 1);
  EXPECT_EQ(Current().version(), 2);
  EXPECT_EQ(NodesOn(Current().plan(), "gpu3"), 0);
}

// Data-parallel replicas (--ranks 1): losing one replica's worker leaves a
// plan that scores about as fast as the new one (its remaining replicas run
// the same stage), so a gain test skipped it ("predicted gain 0.0%") and the
// survivors waited forever for a version without the lost device. A
// membership change publishes whatever the predicted gain (issue 26).
TEST_F(ReplanPolicyTest, ALostReplicaIsReplannedWhateverThePredictedGain) {
  v1::PlanRequest request = ChainRequest();
  request.mutable_options()->set_num_ranks(1);
  request.mutable_options()->set_num_replicas(4);
  ASSERT_NO_FATAL_FAILURE(Start(Fast(), request));
  ASSERT_EQ(Current().plan().replicas_size(), 4);
  clock_.Advance(absl::Seconds(6));
  for (const char* w : {"w0", "w1", "w2"}) ASSERT_TRUE(registry_->Heartbeat(job_, w).ok());
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v2 = Current();
  ASSERT_EQ(v2.version(), 2) << "the loss of a replica published nothing";
  EXPECT_EQ(v2.reason().substr(0, 14), "worker w3 lost") << v2.reason();
  for (const v1::Replica& r : v2.plan().replicas()) {
    for (const std::string& d : r.rank_device_ids()) EXPECT_NE(d, "gpu3");
  }
  EXPECT_EQ(NodesOn(v2.plan(), "gpu3"), 0);
}

TEST_F(ReplanPolicyTest, DisabledDoesNothing) {
  ReplanPolicyOptions o = Fast();
  o.enabled = false;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Report(6, {{"gpu2", 2.0}});
  EXPECT_EQ(TickAndWait(), 0);
  EXPECT_EQ(Current().version(), 1);
}

// Lets w3's lease run out while the others renew theirs.
void LoseW3(FakeClock& clock, JobRegistry& registry, const std::string& job) {
  clock.Advance(absl::Seconds(6));
  for (const char* w : {"w0", "w1", "w2"}) ASSERT_TRUE(registry.Heartbeat(job, w).ok());
  clock.Advance(absl::Seconds(6));
  EXPECT_EQ(registry.CheckLeases(), 1);
}

// Issue 26: once a version runs, the policy plans what the loss of each of
// its devices would publish (the workers compile those stages ahead); a
// loss then publishes exactly that plan.
TEST_F(ReplanPolicyTest, ALossPublishesTheContingencyPlannedForIt) {
  ReplanPolicyOptions o = Fast();
  o.calibrate = false;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  EXPECT_EQ(Current().contingencies_size(), 0) << "planned before the version ran";
  Report(4, {});
  EXPECT_EQ(TickAndWait(), 0);  // no evaluation, contingencies only
  const v1::VersionedPlan v1 = Current();
  ASSERT_EQ(v1.contingencies_size(), 4);  // one host: no host loss
  const v1::ContingencyPlan* for_gpu3 = FindContingency(v1, {"gpu3"});
  ASSERT_NE(for_gpu3, nullptr);
  EXPECT_EQ(NodesOn(for_gpu3->plan(), "gpu3"), 0);
  EXPECT_EQ(NodesOn(for_gpu3->plan(), "gpu0") + NodesOn(for_gpu3->plan(), "gpu1") +
                NodesOn(for_gpu3->plan(), "gpu2"),
            16);
  // Marked, so that the published plan shows where it came from (a plan
  // solved at the loss under the same reports is the same plan).
  std::vector<v1::ContingencyPlan> marked(v1.contingencies().begin(), v1.contingencies().end());
  for (v1::ContingencyPlan& c : marked) {
    c.mutable_plan()->mutable_calibration()->set_previous_step_seconds(42);
  }
  ASSERT_TRUE(registry_->SetContingencies(job_, 1, marked).ok());
  EXPECT_EQ(registry_->SetContingencies(job_, 7, marked).code(), absl::StatusCode::kAborted);
  ASSERT_NO_FATAL_FAILURE(LoseW3(clock_, *registry_, job_));
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v2 = Current();
  ASSERT_EQ(v2.version(), 2);
  EXPECT_EQ(v2.plan().calibration().previous_step_seconds(), 42) << "not the contingency";
  EXPECT_EQ(v2.contingencies_size(), 0) << "v1's contingencies served with v2";
}

// The planner's --contingency-plans 0: a running version gets none (nothing
// is solved, GetPlan sends none) and a loss is solved when it comes.
TEST_F(ReplanPolicyTest, NoContingencyIsPlannedWithTheFlagAtZero) {
  ReplanPolicyOptions o = Fast();
  o.calibrate = false;
  o.max_contingencies = 0;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Report(4, {});
  EXPECT_EQ(TickAndWait(), 0);
  EXPECT_EQ(Current().contingencies_size(), 0);
  ASSERT_NO_FATAL_FAILURE(LoseW3(clock_, *registry_, job_));
  EXPECT_EQ(TickAndWait(), 1);
  EXPECT_EQ(Current().version(), 2);
  EXPECT_EQ(NodesOn(Current().plan(), "gpu3"), 0);
}

// A contingency planned when every device ran as modelled no longer stands
// once gpu0 turns out 3x slower: the loss publishes a fresh plan that gives
// gpu0 less work.
TEST_F(ReplanPolicyTest, AContingencyTheCalibrationOutgrewIsNotPublished) {
  ReplanPolicyOptions o = Fast();
  o.calibrate = false;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Report(4, {});
  TickAndWait();
  const v1::VersionedPlan v1 = Current();
  const v1::ContingencyPlan* planned = FindContingency(v1, {"gpu3"});
  ASSERT_NE(planned, nullptr);
  const v1::Plan ahead = planned->plan();
  Report(20, {{"gpu0", 3.0}});
  ASSERT_NO_FATAL_FAILURE(LoseW3(clock_, *registry_, job_));
  EXPECT_EQ(TickAndWait(), 1);
  const v1::VersionedPlan v2 = Current();
  ASSERT_EQ(v2.version(), 2);
  EXPECT_NE(v2.plan().SerializeAsString(), ahead.SerializeAsString());
  EXPECT_LT(NodesOn(v2.plan(), "gpu0"), NodesOn(ahead, "gpu0"));
  EXPECT_EQ(NodesOn(v2.plan(), "gpu3"), 0);
}

TEST(ContingencyPlansTest, PlansForEachDeviceThenEachHostOfSeveral) {
  DecodedPlan plan;
  plan.replica_devices = {{"a0", "a1", "b0"}, {"b1", "c0", "a1"}};
  v1::ClusterTopology cluster;
  for (const auto& [id, host] : std::vector<std::pair<std::string, std::string>>{
           {"a0", "a"}, {"a1", "a"}, {"b0", "b"}, {"b1", "b"}, {"c0", "c"}, {"x", "c"}}) {
    v1::Device* d = cluster.add_devices();
    d->set_id(id);
    d->set_host(host);
  }
  using Sets = std::vector<std::vector<std::string>>;
  EXPECT_EQ(ContingencyLossSets(plan, cluster, {"x"}, 16), (Sets{{"a0", "x"},
                                                                 {"a1", "x"},
                                                                 {"b0", "x"},
                                                                 {"b1", "x"},
                                                                 {"c0", "x"},
                                                                 {"a0", "a1", "x"},
                                                                 {"b0", "b1", "x"}}));
  EXPECT_EQ(ContingencyLossSets(plan, cluster, {}, 2), (Sets{{"a0"}, {"a1"}}));
  // A loss that leaves no device is not planned for.
  DecodedPlan one_host;
  one_host.replica_devices = {{"a0", "a1"}};
  v1::ClusterTopology two;
  *two.add_devices() = cluster.devices(0);
  *two.add_devices() = cluster.devices(1);
  EXPECT_EQ(ContingencyLossSets(one_host, two, {}, 16), (Sets{{"a0"}, {"a1"}}));
}

TEST(ContingencyPlansTest, StandsWithinTheSlackOfAFreshPlan) {
  EXPECT_TRUE(ContingencyStillFits(1.04, 1.0, 0.05));
  EXPECT_FALSE(ContingencyStillFits(1.06, 1.0, 0.05));
  EXPECT_TRUE(ContingencyStillFits(0.9, 1.0, 0.05));
  EXPECT_FALSE(ContingencyStillFits(std::numeric_limits<double>::infinity(), 1.0, 0.05));
  EXPECT_TRUE(ContingencyStillFits(2.0, std::numeric_limits<double>::infinity(), 0.05));
}

}  // namespace
}  // namespace pipeplan::server
