#include "pipeplan/server/base/clock.h"

namespace pipeplan::server {
namespace {
class WallClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};
}  // namespace

Clock* RealClock() {
  static WallClock* clock = new WallClock();
  return clock;
}

}  // namespace pipeplan::server
