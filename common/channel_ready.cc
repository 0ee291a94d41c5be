#include "pipeplan/common/channel_ready.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pipeplan::common {

absl::Status WaitForChannelReady(grpc::Channel* channel, absl::Time deadline) {
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (absl::Now() >= deadline ||
        !channel->WaitForStateChange(state, absl::ToChronoTime(deadline))) {
      return absl::UnavailableError(
          absl::StrCat("channel not ready by the deadline (state ", static_cast<int>(state), ")"));
    }
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return absl::OkStatus();
}

}  // namespace pipeplan::common
