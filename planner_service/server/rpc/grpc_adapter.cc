#include "grpc_adapter.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "pipeplan/common/grpc_status.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/obs/metrics.h"
#include "pipeplan/v1/planner_service.grpc.pb.h"

namespace pipeplan::server {
namespace {

using State = GrpcAdapter::State;

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const auto d = ctx->deadline();
  if (d >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

std::string CodeName(const absl::Status& s) { return absl::StatusCodeToString(s.code()); }

// Streams plan versions to one worker. The registry holds a weak_ptr to the
// sink; the reactor owns it, so a finished stream simply stops receiving.
class WatchReactor : public grpc::ServerWriteReactor<v1::PlanUpdate> {
 public:
  class Sink : public PlanWatcher {
   public:
    explicit Sink(WatchReactor* r) : reactor_(r) {}
    void OnPlan(std::shared_ptr<const v1::PlanUpdate> update) override {
      absl::MutexLock l(&mu_);
      if (!reactor_ || finished_) return;
      queue_.push_back(std::move(update));
      if (!writing_) WriteNextLocked();
    }
    void OnClose(const absl::Status& status) override {
      absl::MutexLock l(&mu_);
      if (!reactor_ || finished_) return;
      if (writing_) {
        pending_close_ = status;
        return;
      }
      FinishLocked(status);
    }
    void WriteDone(bool ok) {
      absl::MutexLock l(&mu_);
      writing_ = false;
      if (!queue_.empty()) queue_.pop_front();
      if (!reactor_ || finished_) return;
      if (!ok) return FinishLocked(absl::CancelledError("stream broken"));
      if (pending_close_) return FinishLocked(*pending_close_);
      if (!queue_.empty()) WriteNextLocked();
    }
    void Cancel() {
      absl::MutexLock l(&mu_);
      if (reactor_ && !finished_) FinishLocked(absl::CancelledError("watch cancelled"));
    }
    void Detach() {
      absl::MutexLock l(&mu_);
      reactor_ = nullptr;
    }
    void FailOrFinish(const absl::Status& s) {
      absl::MutexLock l(&mu_);
      if (reactor_ && !finished_) FinishLocked(s);
    }

   private:
    void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      writing_ = true;
      reactor_->StartWrite(queue_.front().get());
    }
    void FinishLocked(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      finished_ = true;
      reactor_->Finish(common::ToGrpcStatus(s));
    }
    absl::Mutex mu_;
    WatchReactor* reactor_ ABSL_GUARDED_BY(mu_);
    std::deque<std::shared_ptr<const v1::PlanUpdate>> queue_ ABSL_GUARDED_BY(mu_);
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
    std::optional<absl::Status> pending_close_ ABSL_GUARDED_BY(mu_);
  };

  WatchReactor() : sink_(std::make_shared<Sink>(this)) {}
  std::shared_ptr<Sink> sink() { return sink_; }
  void OnWriteDone(bool ok) override { sink_->WriteDone(ok); }
  void OnCancel() override { sink_->Cancel(); }
  void OnDone() override {
    sink_->Detach();
    delete this;
  }

 private:
  std::shared_ptr<Sink> sink_;
};

// Unary call whose answer comes later, from the solver pool.
class SolveReactor : public grpc::ServerUnaryReactor {
 public:
  void OnCancel() override { ctx.cancelled->store(true); }
  void OnDone() override { delete this; }
  CallContext ctx;
};

}  // namespace

class GrpcAdapter::Service final : public v1::PlannerService::CallbackService {
 public:
  Service(PlannerHandlers* handlers, Metrics* metrics, std::string token)
      : handlers_(handlers), metrics_(metrics), token_(std::move(token)) {}

  void set_state(State s) { state_.store(s); }

  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* ctx, const v1::PlanRequest* req,
                                 v1::Plan* resp) override {
    return Solve<v1::Plan>(ctx, "Plan", resp, [&](const CallContext& cc, Callback<v1::Plan> done) {
      handlers_->HandlePlan(*req, cc, std::move(done));
    });
  }
  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                      const v1::CreateJobRequest* req, v1::Job* resp) override {
    return Solve<v1::Job>(ctx, "CreateJob", resp,
                          [&](const CallContext& cc, Callback<v1::Job> done) {
                            handlers_->HandleCreateJob(*req, cc, std::move(done));
                          });
  }
  grpc::ServerUnaryReactor* ReplanJob(grpc::CallbackServerContext* ctx,
                                      const v1::ReplanJobRequest* req,
                                      v1::VersionedPlan* resp) override {
    return Solve<v1::VersionedPlan>(ctx, "ReplanJob", resp,
                                    [&](const CallContext& cc, Callback<v1::VersionedPlan> done) {
                                      handlers_->HandleReplanJob(*req, cc, std::move(done));
                                    });
  }
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) override {
    return Unary(ctx, "GetJob", resp, [&] { return handlers_->GetJob(*req); });
  }
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override {
    return Unary(ctx, "ListJobs", resp, [&] { return handlers_->ListJobs(*req); });
  }
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const v1::DeleteJobRequest* req,
                                      v1::DeleteJobResponse* resp) override {
    return Unary(ctx, "DeleteJob", resp, [&] { return handlers_->DeleteJob(*req); });
  }

  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* req, v1::Job* resp) override {
    return Unary(ctx, "CancelJob", resp, [&] { return handlers_->CancelJob(*req); });
  }
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* ctx, const v1::GetPlanRequest* req,
                                    v1::VersionedPlan* resp) override {
    return Unary(ctx, "GetPlan", resp, [&] { return handlers_->GetPlan(*req); });
  }
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterWorkerRequest* req,
                                           v1::Assignment* resp) override {
    return Unary(ctx, "RegisterWorker", resp, [&] { return handlers_->RegisterWorker(*req); });
  }
  grpc::ServerUnaryReactor* ReportStep(grpc::CallbackServerContext* ctx,
                                       const v1::ReportStepRequest* req,
                                       v1::ReportStepResponse* resp) override {
    return Unary(ctx, "ReportStep", resp, [&] { return handlers_->ReportStep(*req); });
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override {
    return Unary(ctx, "Heartbeat", resp, [&] { return handlers_->Heartbeat(*req); });
  }
  grpc::ServerUnaryReactor* FinishWorker(grpc::CallbackServerContext* ctx,
                                         const v1::FinishWorkerRequest* req,
                                         v1::Job* resp) override {
    return Unary(ctx, "FinishWorker", resp, [&] { return handlers_->FinishWorker(*req); });
  }
  grpc::ServerUnaryReactor* RendezvousSet(grpc::CallbackServerContext* ctx,
                                          const v1::RendezvousSetRequest* req,
                                          v1::RendezvousSetResponse* resp) override {
    return Unary(ctx, "RendezvousSet", resp, [&] { return handlers_->RendezvousSet(*req); });
  }
  grpc::ServerUnaryReactor* RendezvousGet(grpc::CallbackServerContext* ctx,
                                          const v1::RendezvousGetRequest* req,
                                          v1::RendezvousGetResponse* resp) override {
    return Unary(ctx, "RendezvousGet", resp, [&] { return handlers_->RendezvousGet(*req); });
  }
  grpc::ServerUnaryReactor* ListStepReports(grpc::CallbackServerContext* ctx,
                                            const v1::ListStepReportsRequest* req,
                                            v1::ListStepReportsResponse* resp) override {
    return Unary(ctx, "ListStepReports", resp, [&] { return handlers_->ListStepReports(*req); });
  }

  grpc::ServerWriteReactor<v1::PlanUpdate>* WatchPlan(grpc::CallbackServerContext* ctx,
                                                      const v1::WatchPlanRequest* req) override {
    auto* reactor = new WatchReactor();
    absl::Status s = Admit(ctx);
    if (s.ok()) s = handlers_->WatchPlan(*req, reactor->sink());
    Count("WatchPlan", s);
    if (!s.ok()) reactor->sink()->FailOrFinish(s);
    return reactor;
  }

 private:
  absl::Status Admit(grpc::CallbackServerContext* ctx) const {
    switch (state_.load()) {
      case State::kRecovering:
        return absl::UnavailableError("the planner is recovering its state; retry");
      case State::kDraining:
        return absl::UnavailableError("the planner is shutting down; retry on another replica");
      case State::kServing:
        break;
    }
    if (token_.empty()) return absl::OkStatus();
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return absl::UnauthenticatedError("missing \"authorization: Bearer <token>\" metadata");
    }
    const std::string_view value(it->second.data(), it->second.size());
    constexpr std::string_view kBearer = "Bearer ";
    if (value.size() < kBearer.size() ||
        absl::AsciiStrToLower(std::string(value.substr(0, kBearer.size()))) != "bearer " ||
        !ConstantTimeEquals(value.substr(kBearer.size()), token_)) {
      return absl::UnauthenticatedError("invalid bearer token");
    }
    return absl::OkStatus();
  }

  void Count(std::string_view method, const absl::Status& s) {
    if (metrics_) metrics_->CountRequest(method, CodeName(s));
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      LogInfo("rpc_error", {{"method", std::string(method)},
                            {"code", CodeName(s)},
                            {"message", std::string(s.message().substr(0, 300))}});
    }
  }

  template <typename Resp, typename F>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, std::string_view method,
                                  Resp* resp, F fn) {
    auto* reactor = ctx->DefaultReactor();
    absl::Status s = Admit(ctx);
    if (s.ok()) {
      absl::StatusOr<Resp> r = fn();
      if (r.ok()) {
        *resp = *std::move(r);
      } else {
        s = r.status();
      }
    }
    Count(method, s);
    reactor->Finish(common::ToGrpcStatus(s));
    return reactor;
  }

  template <typename Resp, typename F>
  grpc::ServerUnaryReactor* Solve(grpc::CallbackServerContext* ctx, std::string_view method,
                                  Resp* resp, F start) {
    auto* reactor = new SolveReactor();
    absl::Status s = Admit(ctx);
    if (!s.ok()) {
      Count(method, s);
      reactor->Finish(common::ToGrpcStatus(s));
      return reactor;
    }
    reactor->ctx.deadline = DeadlineOf(ctx);
    std::string m(method);
    start(reactor->ctx, [this, reactor, resp, m](absl::StatusOr<Resp> r) {
      absl::Status st = r.status();
      if (r.ok()) *resp = *std::move(r);
      Count(m, st);
      reactor->Finish(common::ToGrpcStatus(st));
    });
    return reactor;
  }

  PlannerHandlers* const handlers_;
  Metrics* const metrics_;
  const std::string token_;
  std::atomic<State> state_{State::kRecovering};
};

GrpcAdapter::GrpcAdapter(PlannerHandlers* handlers, Metrics* metrics, std::string token)
    : service_(std::make_unique<Service>(handlers, metrics, std::move(token))) {}

GrpcAdapter::~GrpcAdapter() = default;

grpc::Service* GrpcAdapter::service() { return service_.get(); }

void GrpcAdapter::set_state(State s) { service_->set_state(s); }

}  // namespace pipeplan::server
