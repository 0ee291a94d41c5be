#include "pipeplan/common/torch_device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pipeplan::common {

std::string TorchDeviceName::ToString() const {
  return cuda ? absl::StrCat("cuda:", index) : "cpu";
}

absl::StatusOr<TorchDeviceName> ParseTorchDevice(absl::string_view name) {
  if (name == "cpu") return TorchDeviceName{};
  if (name == "cuda") return TorchDeviceName{.cuda = true, .index = 0};
  absl::string_view digits = name;
  absl::ConsumePrefix(&digits, "cuda:");
  int index = -1;
  // SimpleAtoi accepts a sign and spaces; a device index is digits only.
  const bool all_digits =
      !digits.empty() && digits.find_first_not_of("0123456789") == absl::string_view::npos;
  if (!all_digits || !absl::SimpleAtoi(digits, &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch device \"", name, "\" is not \"cpu\", \"cuda:N\" or a local CUDA index \"N\""));
  }
  return TorchDeviceName{.cuda = true, .index = index};
}

}  // namespace pipeplan::common
