// Everything JobRegistry guards with its lock, in one place: the job table
// and the pieces that work on it. JobRegistry reaches it only through
// `state_` (ABSL_PT_GUARDED_BY(mu_)), so the lock analysis checks every
// access at that one boundary.
#ifndef PIPEPLAN_SERVER_JOBS_REGISTRY_STATE_H_
#define PIPEPLAN_SERVER_JOBS_REGISTRY_STATE_H_

#include "job_table.h"
#include "plan_versions.h"
#include "rendezvous_space.h"
#include "replication_sync.h"
#include "step_reports.h"
#include "worker_leases.h"

namespace pipeplan::server::internal {

struct RegistryState {
  explicit RegistryState(const RegistryContext* ctx)
      : table(ctx),
        sync(ctx, &table),
        plans(ctx),
        leases(ctx, &table, &sync),
        reports(ctx, &leases),
        rendezvous(ctx) {}

  JobTable table;
  ReplicationSync sync;
  PlanVersions plans;
  WorkerLeases leases;
  StepReports reports;
  RendezvousSpace rendezvous;
};

}  // namespace pipeplan::server::internal

#endif  // PIPEPLAN_SERVER_JOBS_REGISTRY_STATE_H_
