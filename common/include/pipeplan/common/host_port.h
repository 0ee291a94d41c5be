// Checks the network addresses a flag names (--listen, --metrics-listen,
// --planner) before anything binds or dials them, so a typo is a usage error
// naming the flag (exit 2) rather than gRPC's "address in use" or
// "Connection refused" from a port that was never given.
#ifndef PIPEPLAN_COMMON_HOST_PORT_H_
#define PIPEPLAN_COMMON_HOST_PORT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pipeplan::common {

// OK for HOST:PORT ("127.0.0.1:7600", "localhost:0", "[::1]:7600") with a
// port of 0..65535, and for gRPC's "unix:PATH". Otherwise a usage error
// (exit_code.h) that names `flag` and the value.
absl::Status CheckHostPort(absl::string_view flag, absl::string_view address);

// The same for each of a comma-separated list (the planner replicas
// "A,B,C" of --planner); an empty list is a usage error too.
absl::Status CheckHostPortList(absl::string_view flag, absl::string_view addresses);

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_HOST_PORT_H_
