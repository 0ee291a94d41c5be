#include "pipeplan/core/schedule/stage_costs.h"

#include <cmath>
#include <string_view>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace pipeplan::schedule {
namespace {

absl::Status CheckVector(std::string_view name, const std::vector<double>& values, size_t want,
                         bool may_be_empty) {
  if (values.empty() && may_be_empty) return absl::OkStatus();
  if (values.size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat("StageCosts.%s has %d entries, want %d%s",
                                                      name, values.size(), want,
                                                      may_be_empty ? " (or none)" : ""));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]) || values[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("StageCosts.%s[%d] = %g must be finite and >= 0", name, i, values[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

StageCosts StageCosts::Uniform(int num_stages, double forward, double backward_input,
                               double backward_weight) {
  StageCosts costs;
  costs.forward.assign(num_stages, forward);
  costs.backward_input.assign(num_stages, backward_input);
  costs.backward_weight.assign(num_stages, backward_weight);
  return costs;
}

absl::Status CheckStageCosts(const StageCosts& c, int num_stages) {
  const size_t s = num_stages;
  const size_t boundaries = num_stages > 0 ? num_stages - 1 : 0;
  for (auto [name, values, want, optional] :
       {std::tuple<std::string_view, const std::vector<double>*, size_t, bool>{
            "forward", &c.forward, s, false},
        {"backward_input", &c.backward_input, s, false},
        {"backward_weight", &c.backward_weight, s, false},
        {"param_bytes", &c.param_bytes, s, true},
        {"activation_bytes", &c.activation_bytes, s, true},
        {"forward_transfer", &c.forward_transfer, boundaries, true},
        {"backward_transfer", &c.backward_transfer, boundaries, true},
        {"send_host", &c.send_host, s, true},
        {"recv_host", &c.recv_host, s, true}}) {
    if (absl::Status st = CheckVector(name, *values, want, optional); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace pipeplan::schedule
