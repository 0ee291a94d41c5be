// The gRPC face of the planner: binds pipeplan.v1.PlannerService's callback
// API to PlannerHandlers, and does only what a transport must: admission
// (recovering / draining -> UNAVAILABLE, the bearer token), the call's
// deadline and cancellation into a CallContext, absl::Status -> grpc::Status,
// request metrics and error logs, and the WatchPlan stream reactor. Unary
// handlers answer inline; solves answer from the solver pool, never blocking
// a gRPC thread.
//
// Private to the server library; PlannerServer owns the adapter.
// Thread safety: set_state may be called from any thread.
#ifndef PIPEPLAN_SERVER_RPC_GRPC_ADAPTER_H_
#define PIPEPLAN_SERVER_RPC_GRPC_ADAPTER_H_

#include <grpcpp/impl/service_type.h>

#include <memory>
#include <string>

#include "pipeplan/server/rpc/planner_handlers.h"

namespace pipeplan::server {

class Metrics;

class GrpcAdapter {
 public:
  enum class State { kRecovering, kServing, kDraining };

  // `handlers` must outlive the adapter; `metrics` may be null. An empty
  // `token` turns bearer-token checks off. Starts in kRecovering.
  GrpcAdapter(PlannerHandlers* handlers, Metrics* metrics, std::string token);
  ~GrpcAdapter();
  GrpcAdapter(const GrpcAdapter&) = delete;
  GrpcAdapter& operator=(const GrpcAdapter&) = delete;

  // What to register with a grpc::ServerBuilder; lives as long as the adapter.
  grpc::Service* service();
  // Only kServing admits calls.
  void set_state(State s);

 private:
  class Service;
  std::unique_ptr<Service> service_;
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_RPC_GRPC_ADAPTER_H_
