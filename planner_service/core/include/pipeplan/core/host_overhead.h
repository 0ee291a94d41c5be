// Calibration of the time a rank spends posting messages.
//
// The simulator charges a rank its compute and lets transfers run beside it;
// a real rank also spends host time on every SEND and RECV it posts (Gloo
// writes as much of a message into the socket as it can in the caller's
// thread). With 8 MB messages on loopback that is milliseconds per message,
// 15-25% of a communication-bound step, and nothing else in the model
// accounts for it.
//
// Each report measures it directly: a SEND or RECV timing is its posting
// time plus the seconds the rank later blocked waiting for it
// (wait_seconds), so seconds - wait_seconds is host time. SENDs and RECVs
// are fitted apart: a SEND writes what it can of its message in the
// caller's thread (milliseconds for 8 MB), a RECV only registers its buffer
// (well under a millisecond), and charging both their average puts the
// SEND's cost on the wrong actions (on the critical path the SEND sits
// between a compute and the transfer it starts). Per report, host seconds
// per SEND = that sum over its SENDs / SENDs (RECV alike); per device and
// direction, the median over the reports after dropping those beyond
// `mad_cutoff` median absolute deviations (a descheduled step). Per-step
// costs that do not grow with messages (an optimizer step, a loss) are not
// in it. The simulator charges it to the posting rank at every SEND and
// RECV (StageCosts.send_host, recv_host).
//
// Plain structs only (no protobuf); reentrant.
#ifndef PIPEPLAN_CORE_HOST_OVERHEAD_H_
#define PIPEPLAN_CORE_HOST_OVERHEAD_H_

#include <map>
#include <span>
#include <string>

#include "pipeplan/core/calibration.h"

namespace pipeplan {

struct HostOverheadOptions {
  // A device needs this many usable reports for a fit.
  int min_samples = 3;
  double mad_cutoff = 3;
};

// Host seconds per message in one direction.
struct HostSeconds {
  double seconds = 0;
  int samples = 0;  // reports kept after outlier rejection; 0: no fit
};

struct DeviceHostOverhead {
  HostSeconds send;  // per SEND posted
  HostSeconds recv;  // per RECV posted
};

struct HostOverhead {
  std::map<std::string, DeviceHostOverhead> devices;
  // Medians over the fitted devices (0 when none): for devices, or
  // directions, without a fit.
  double default_send_seconds = 0;
  double default_recv_seconds = 0;

  // Seconds per SEND / per RECV on `device_id`: its fit or the default.
  double SendSeconds(const std::string& device_id) const;
  double RecvSeconds(const std::string& device_id) const;
  bool empty() const { return devices.empty(); }
};

// Fits per device from reports with SEND/RECV timings that carry wall-clock
// stamps (post_unix_us; older workers did not report waits apart). Reports
// without a device or such messages are skipped; a device gets a fit of a
// direction from min_samples reports with messages of that direction.
HostOverhead FitHostOverhead(std::span<const StepSample> samples,
                             const HostOverheadOptions& options = {});

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_HOST_OVERHEAD_H_
