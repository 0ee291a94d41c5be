// Which transport a rendezvous may use when ranks share a GPU. NCCL refuses
// two ranks of one communicator on the same device ("Duplicate GPU
// detected"), so workers that share a GPU (two stages on one H100) must talk
// over another path: Gloo, staging device tensors through pinned host
// buffers. Every rank publishes its device's UUID at rendezvous and decides
// with the same pure function on the same list, so all ranks pick the same
// transport without another round.
#ifndef PIPEPLAN_WORKER_TRANSPORT_DEVICE_SHARING_H_
#define PIPEPLAN_WORKER_TRANSPORT_DEVICE_SHARING_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipeplan::worker {

// The first pair of ranks (lowest first) whose device UUIDs are equal, if
// any. `uuids[r]` is rank r's; an empty UUID (a rank without a GPU) never
// matches.
std::optional<std::pair<int, int>> FirstSharedDevice(const std::vector<std::string>& uuids);

// The transport the ranks use when `requested` ("nccl" or "gloo") was asked
// for and the ranks' devices are `uuids`: "gloo" instead of "nccl" when two
// ranks share a device or a rank has no GPU (empty UUID), else `requested`.
std::string TransportForDevices(const std::string& requested,
                                const std::vector<std::string>& uuids);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TRANSPORT_DEVICE_SHARING_H_
