#include "global_flags.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/host_port.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::cli {

const common::FlagSet& GlobalFlagSet() {
  static const common::FlagSet* flags = [] {
    auto* f = new common::FlagSet("pipeplan");
    f->Section("global flags (before or after the command)")
        .Value("planner", "ADDR",
               "talk to a running pipeplan-planner (e.g. 127.0.0.1:7600), or\n"
               "replicas A,B,C (the next one when one dies);\n"
               "without it, plan and simulate run in-process");
    common::AddPlannerCredentialFlags(f);
    f->Value("timeout", "S", "per-call timeout in seconds (60)")
        .Value("output", "json|table", "output format (table)")
        .Short('o')
        .Switch("json", "same as -o json")
        .Switch("version", "print the version and exit");
    return f;
  }();
  return *flags;
}

absl::StatusOr<GlobalFlags> GlobalFlagsFrom(const common::ParsedFlags& flags) {
  GlobalFlags g;
  g.planner = flags.Get("planner").value_or("");
  if (flags.Has("planner")) {
    PIPEPLAN_RETURN_IF_ERROR(common::CheckHostPortList("planner", g.planner));
  }
  g.tls_ca = flags.Get("tls-ca").value_or("");
  g.tls_cert = flags.Get("tls-cert").value_or("");
  g.tls_key = flags.Get("tls-key").value_or("");
  g.token_file = flags.Get("token-file").value_or("");
  PIPEPLAN_ASSIGN_OR_RETURN(g.timeout_seconds, flags.GetDouble("timeout", 60));
  if (!(g.timeout_seconds > 0)) {
    return common::UsageError(absl::StrCat("--timeout wants positive seconds, got \"",
                                           flags.Get("timeout").value_or(""), "\""));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(std::string output,
                            flags.GetChoice("output", {"json", "table"}, "table"));
  if (flags.Has("json") && output == "table" && flags.Has("output")) {
    return common::UsageError("give -o table or --json, not both");
  }
  g.output = output == "json" || flags.Has("json") ? Output::kJson : Output::kTable;
  return g;
}

absl::StatusOr<std::unique_ptr<client::PlannerClient>> Connect(const GlobalFlags& g) {
  if (g.planner.empty()) {
    return common::UsageError("this command needs --planner ADDR");
  }
  client::ClientOptions o;
  o.address = g.planner;
  o.tls_ca_file = g.tls_ca;
  o.tls_cert_file = g.tls_cert;
  o.tls_key_file = g.tls_key;
  o.token_file = g.token_file;
  o.timeout = absl::Seconds(g.timeout_seconds);
  return client::PlannerClient::Connect(o);
}

absl::Status WithEveryReplicasError(const GlobalFlags& global, const absl::Status& error) {
  const bool down = error.code() == absl::StatusCode::kUnavailable ||
                    error.code() == absl::StatusCode::kDeadlineExceeded;
  if (!down || global.planner.find(',') == std::string::npos) return error;
  std::string reasons;
  for (absl::string_view part : absl::StrSplit(global.planner, ',', absl::SkipWhitespace())) {
    GlobalFlags one = global;
    one.planner = std::string(absl::StripAsciiWhitespace(part));
    one.timeout_seconds = std::min(global.timeout_seconds, 5.0);
    absl::StatusOr<std::unique_ptr<client::PlannerClient>> c = Connect(one);
    absl::Status s = c.ok() ? (*c)->ListJobs().status() : c.status();
    absl::StrAppend(&reasons, "\n  ", one.planner, ": ",
                    s.ok() ? "answers now" : absl::StatusCodeToString(s.code()), s.ok() ? "" : ": ",
                    s.message());
  }
  return absl::Status(error.code(),
                      absl::StrCat("no planner replica answered; each one:", reasons));
}

}  // namespace pipeplan::cli
