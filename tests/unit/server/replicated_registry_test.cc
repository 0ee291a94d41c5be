// Job ownership between replicated planners against a real PostgreSQL the
// test starts: leases with fencing tokens in the store, and two registries
// (two "replicas", each with its own store connection pool and ownership)
// racing on one job.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_ownership.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/store/store.h"
#include "postgres_test_fixture.h"

namespace pipeplan::server {
namespace {

class ReplicatedTest : public PostgresDatabaseTest {
 protected:
  // One planner replica: its store, ownership and registry.
  struct Replica {
    std::unique_ptr<Store> store;
    std::unique_ptr<JobOwnership> ownership;
    std::unique_ptr<JobRegistry> registry;
  };
  Replica Start(const std::string& id, absl::Duration lease = absl::Seconds(10),
                absl::Duration worker_lease = absl::Seconds(10)) {
    Replica r;
    r.store = Open();
    r.ownership = std::make_unique<JobOwnership>(r.store.get(),
                                                 JobOwnership::Options{id, id + ":7600", lease});
    r.registry = std::make_unique<JobRegistry>(r.store.get(), RealClock(),
                                               JobRegistry::Options{.lease = worker_lease});
    r.registry->EnableReplication(r.ownership.get());
    EXPECT_TRUE(r.registry->Recover().ok());
    return r;
  }
};

TEST_F(ReplicatedTest, LeaseHasOneOwnerAndTokensFenceTheOldOne) {
  std::unique_ptr<Store> a = Open();
  std::unique_ptr<Store> b = Open();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->CreateJob({"j", "", 1, 1}, Version("j", 1, "created")).ok());
  EXPECT_EQ(a->ClaimJob("nope", "A", "a:1", absl::Seconds(5), false).status().code(),
            absl::StatusCode::kNotFound);
  // Held for the checks below however slow this machine is: a lease shorter
  // than the round trips (it was 400 ms) lapsed under load before B asked.
  auto la = a->ClaimJob("j", "A", "a:1", absl::Seconds(60), false);
  ASSERT_TRUE(la.ok()) << la.status();
  EXPECT_EQ(la->token, 1);
  // Held: B may not take it; A renewing keeps its token.
  EXPECT_EQ(b->ClaimJob("j", "B", "b:1", absl::Seconds(5), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto again = a->ClaimJob("j", "A", "a:1", absl::Seconds(60), false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->token, 1);
  auto heads = b->JobHeads();
  ASSERT_TRUE(heads.ok());
  ASSERT_EQ(heads->size(), 1u);
  EXPECT_EQ((*heads)[0].owner, "A");

  // A pauses past its lease (renewed short, then left to lapse): once the
  // store shows no owner, B takes the job with the next token.
  ASSERT_TRUE(a->ClaimJob("j", "A", "a:1", absl::Milliseconds(50), false).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    absl::SleepFor(absl::Milliseconds(20));
    heads = b->JobHeads();
    ASSERT_TRUE(heads.ok());
  } while ((*heads)[0].owner != "" && absl::Now() < give_up);
  EXPECT_EQ((*heads)[0].owner, "");
  auto lb = b->ClaimJob("j", "B", "b:1", absl::Seconds(5), false);
  ASSERT_TRUE(lb.ok()) << lb.status();
  EXPECT_EQ(lb->token, 2);

  // A wakes up: its renewal no longer lists the job, and its writes fail.
  auto renewed = a->RenewJobLeases("A", absl::Seconds(5));
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(renewed->empty());
  EXPECT_EQ(a->AppendPlanFenced(Version("j", 2, "stale A"), *la).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->SetJobStateFenced("j", v1::JOB_FAILED, "stale", *la).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(b->AppendPlanFenced(Version("j", 2, "B"), *lb).ok());
  auto v2 = a->GetPlan("j", 2);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->reason(), "B");
  // Forced (an operator's replan elsewhere): A takes it back, token 3.
  auto forced = a->ClaimJob("j", "A", "a:1", absl::Seconds(5), true);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->token, 3);
  EXPECT_EQ(b->AppendPlanFenced(Version("j", 3, "stale B"), *lb).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Heartbeats are batched into one statement; ids with characters of the
// array syntax survive it; an older time never replaces a newer one.
TEST_F(ReplicatedTest, HeartbeatBatchesKeepTheNewestTime) {
  std::unique_ptr<Store> s = Open();
  ASSERT_NE(s, nullptr);
  const std::string job = "j,\"{x}\\";
  ASSERT_TRUE(s->CreateJob({job, "", 1, 1}, Version(job, 1, "created")).ok());
  std::vector<std::string> ids = {"w0", "w \"1\"", "w\\2,{}"};
  for (const std::string& id : ids) {
    WorkerRecord w;
    w.job_id = job;
    w.info.set_worker_id(id);
    w.last_heartbeat_unix_ms = 1000;
    ASSERT_TRUE(s->PutWorker(w).ok());
  }
  ASSERT_TRUE(
      s->TouchWorkers(
           {{job, ids[0], 5000}, {job, ids[1], 6000}, {job, ids[2], 500}, {job, "unknown", 9000}})
          .ok());
  EXPECT_EQ(s->GetWorker(job, ids[0])->last_heartbeat_unix_ms, 5000);
  EXPECT_EQ(s->GetWorker(job, ids[1])->last_heartbeat_unix_ms, 6000);
  EXPECT_EQ(s->GetWorker(job, ids[2])->last_heartbeat_unix_ms, 1000);
  EXPECT_TRUE(s->TouchWorkers({}).ok());
}

// Two registries publish version N+1 of one job at once, the owner and an
// operator's replan on the other replica (which takes the job over):
// exactly one version N+1 is stored, the other call fails, and the loser
// never writes anything after.
TEST_F(ReplicatedTest, TwoRegistriesRacingToPublishOneWins) {
  Replica a = Start("A");
  Replica b = Start("B");
  for (int round = 0; round < 10; ++round) {
    auto job = a.registry->CreateJob(absl::StrCat("race", round), v1::PlanRequest(), v1::Plan());
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE(a.registry->Owns(job->id()));
    ASSERT_TRUE(b.registry->SyncFromStore().ok());
    ASSERT_FALSE(b.registry->Owns(job->id()));
    // The policy on a non-owner never publishes.
    EXPECT_EQ(b.registry
                  ->PublishPlan(job->id(), v1::PlanRequest(), v1::Plan(), "b policy", 1,
                                PublishAs::kOwner)
                  .status()
                  .code(),
              absl::StatusCode::kFailedPrecondition);
    absl::StatusOr<int64_t> ra, rb;
    std::thread ta([&] {
      ra = a.registry->PublishPlan(job->id(), v1::PlanRequest(), v1::Plan(), "a", 1,
                                   PublishAs::kOwner);
    });
    std::thread tb([&] {
      rb = b.registry->PublishPlan(job->id(), v1::PlanRequest(), v1::Plan(), "b", 1,
                                   PublishAs::kOperator);
    });
    ta.join();
    tb.join();
    ASSERT_NE(ra.ok(), rb.ok()) << ra.status() << " / " << rb.status();
    const absl::Status loser = ra.ok() ? rb.status() : ra.status();
    EXPECT_TRUE(loser.code() == absl::StatusCode::kFailedPrecondition ||
                loser.code() == absl::StatusCode::kAborted)
        << loser;
    auto v2 = a.store->GetPlan(job->id(), 2);
    ASSERT_TRUE(v2.ok());
    EXPECT_EQ(v2->reason(), ra.ok() ? "a" : "b");
    EXPECT_EQ(a.store->GetPlan(job->id(), 3).status().code(), absl::StatusCode::kNotFound);
  }
}

// A version one replica publishes reaches the other's memory (and its
// watchers) on the next sync; a job one creates is served by the other at
// once; a dead owner's job is claimed by a live replica after its lease.
TEST_F(ReplicatedTest, ReplicasFollowEachOtherAndTakeOverExpiredJobs) {
  // A's lease must outlast the steps before it "dies" on a loaded machine
  // (at 600 ms B's first sync could claim the job early); after that the
  // test waits for the takeover instead of sleeping a fixed time.
  Replica a = Start("A", absl::Seconds(3));
  Replica b = Start("B", absl::Seconds(3));
  auto job = a.registry->CreateJob("follow", v1::PlanRequest(), v1::Plan());
  ASSERT_TRUE(job.ok());
  auto seen = b.registry->GetJob(job->id());
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->name(), "follow");
  v1::WorkerInfo w;
  w.set_worker_id("w0");
  EXPECT_EQ(b.registry->RegisterWorker(job->id(), w).status().code(),
            absl::StatusCode::kInvalidArgument);  // no device: but the job was found

  // Rendezvous through different replicas.
  ASSERT_TRUE(a.registry->RendezvousSet(job->id(), "v1/addr/0", "127.0.0.1:1").ok());
  auto got = b.registry->RendezvousGet(job->id(), "v1/addr/0");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->found());
  EXPECT_EQ(got->value(), "127.0.0.1:1");
  EXPECT_FALSE(b.registry->RendezvousGet(job->id(), "v1/addr/1")->found());

  ASSERT_TRUE(a.registry->PublishPlan(job->id(), v1::PlanRequest(), v1::Plan(), "v2").ok());
  ASSERT_TRUE(b.registry->SyncFromStore().ok());
  auto current = b.registry->GetPlan(job->id(), 0);
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(current->version(), 2);

  // A stops renewing (dies): after its lease B's sync claims the job.
  EXPECT_FALSE(b.registry->Owns(job->id()));
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  do {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(b.registry->SyncFromStore().ok());
  } while (!b.registry->Owns(job->id()) && absl::Now() < give_up);
  EXPECT_TRUE(b.registry->Owns(job->id()));
  auto v3 = b.registry->PublishPlan(job->id(), v1::PlanRequest(), v1::Plan(), "by B", 2,
                                    PublishAs::kOwner);
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(*v3, 3);
  // A comes back: its fenced write fails and it drops the job.
  EXPECT_FALSE(
      a.registry
          ->PublishPlan(job->id(), v1::PlanRequest(), v1::Plan(), "stale A", 2, PublishAs::kOwner)
          .ok());
  EXPECT_FALSE(a.registry->Owns(job->id()));
}

// Only the owner declares a worker lost, also one that registered through
// another replica; a heartbeat through another replica keeps it alive.
TEST_F(ReplicatedTest, OnlyTheOwnerDeclaresWorkersLost) {
  Replica a = Start("A", absl::Seconds(10), absl::Milliseconds(600));
  Replica b = Start("B", absl::Seconds(10), absl::Milliseconds(600));
  v1::PlanRequest request;
  request.mutable_cluster()->add_devices()->set_id("d0");
  request.mutable_cluster()->add_devices()->set_id("d1");
  auto job = a.registry->CreateJob("lost", request, v1::Plan());
  ASSERT_TRUE(job.ok());
  for (const char* id : {"w0", "w1"}) {
    v1::WorkerInfo w;
    w.set_worker_id(id);
    w.set_device_id(id == std::string("w0") ? "d0" : "d1");
    ASSERT_TRUE(b.registry->RegisterWorker(job->id(), w).ok());
  }
  // w1 heartbeats through B (batched into the store by B's sync); w0 is
  // silent. B does not own the job: it declares nobody lost.
  const absl::Time end = absl::Now() + absl::Milliseconds(1500);
  int lost_by_a = 0;
  while (absl::Now() < end) {
    ASSERT_TRUE(b.registry->Heartbeat(job->id(), "w1").ok());
    ASSERT_TRUE(b.registry->SyncFromStore().ok());
    ASSERT_TRUE(a.registry->SyncFromStore().ok());
    EXPECT_EQ(b.registry->CheckLeases(), 0);
    lost_by_a += a.registry->CheckLeases();
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(lost_by_a, 1);
  auto seen = a.store->GetWorker(job->id(), "w0");
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->state, v1::WORKER_LOST);
  EXPECT_EQ(a.store->GetWorker(job->id(), "w1")->state, v1::WORKER_ACTIVE);
}

}  // namespace
}  // namespace pipeplan::server
