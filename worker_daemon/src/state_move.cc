#include "pipeplan/worker/state_move.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace pipeplan::worker {
namespace {

constexpr uint64_t kLengthTag = uint64_t{1} << 61;
constexpr uint64_t kPayloadTag = kLengthTag + 1;

void AppendU64(std::string* out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out->append(b, 8);
}

bool ReadU64(const std::string& in, size_t* pos, uint64_t* v) {
  if (in.size() - *pos < 8) return false;
  std::memcpy(v, in.data() + *pos, 8);
  *pos += 8;
  return true;
}

// Names `from` sends `to`, in plan order.
std::vector<const MovePlan::Item*> Between(const MovePlan& plan, int from, int to) {
  std::vector<const MovePlan::Item*> out;
  for (const MovePlan::Item& item : plan.items) {
    if (item.source == from && from != to &&
        std::find(item.targets.begin(), item.targets.end(), to) != item.targets.end()) {
      out.push_back(&item);
    }
  }
  return out;
}

absl::Status WaitAll(std::vector<std::unique_ptr<PendingOp>>& ops, absl::Duration timeout) {
  absl::Status first;
  for (auto& op : ops) {
    absl::Status s = op->Wait(timeout);
    if (first.ok() && !s.ok()) first = s;
  }
  ops.clear();
  return first;
}

}  // namespace

absl::StatusOr<MovePlan> MovePlan::Build(
    const std::map<std::string, std::vector<int>>& old_holders,
    const std::map<std::string, std::vector<int>>& new_holders) {
  MovePlan plan;
  for (const auto& [name, targets] : new_holders) {
    Item item;
    item.name = name;
    item.targets = targets;
    std::sort(item.targets.begin(), item.targets.end());
    auto it = old_holders.find(name);
    if (it != old_holders.end() && !it->second.empty()) {
      item.source = *std::min_element(it->second.begin(), it->second.end());
      // A target that already holds the state keeps its copy.
      std::erase_if(item.targets, [&](int t) {
        return std::find(it->second.begin(), it->second.end(), t) != it->second.end();
      });
    } else if (!item.targets.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state \"", name, "\" is needed after the switch but nobody holds it"));
    }
    plan.items.push_back(std::move(item));
  }
  return plan;
}

absl::StatusOr<std::map<std::string, std::string>> MoveState(
    Transport& transport, const MovePlan& plan, const std::map<std::string, std::string>& local,
    absl::Duration timeout) {
  const int me = transport.rank();
  const int n = transport.size();
  // Payloads to send, built (and checked) before anything goes out.
  std::vector<std::string> out_payload(n);
  std::vector<uint64_t> out_length(n, 0);
  for (int to = 0; to < n; ++to) {
    for (const MovePlan::Item* item : Between(plan, me, to)) {
      auto it = local.find(item->name);
      if (it == local.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("member ", me, " must send \"", item->name, "\" but does not hold it"));
      }
      AppendU64(&out_payload[to], it->second.size());
      out_payload[to] += it->second;
    }
    out_length[to] = out_payload[to].size();
  }
  std::vector<uint64_t> in_length(n, 0);
  std::vector<std::unique_ptr<PendingOp>> ops;
  auto post = [&](bool send, int peer, uint64_t tag, void* data, size_t bytes) -> absl::Status {
    absl::StatusOr<std::unique_ptr<PendingOp>> op =
        send ? transport.Send(peer, tag, {static_cast<const std::byte*>(data), bytes})
             : transport.Recv(peer, tag, {static_cast<std::byte*>(data), bytes});
    if (!op.ok()) return op.status();
    ops.push_back(*std::move(op));
    return absl::OkStatus();
  };
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    if (!Between(plan, me, peer).empty()) {
      if (absl::Status s = post(true, peer, kLengthTag, &out_length[peer], 8); !s.ok()) return s;
    }
    if (!Between(plan, peer, me).empty()) {
      if (absl::Status s = post(false, peer, kLengthTag, &in_length[peer], 8); !s.ok()) return s;
    }
  }
  if (absl::Status s = WaitAll(ops, timeout); !s.ok()) return s;

  std::vector<std::string> in_payload(n);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    if (out_length[peer] > 0) {
      if (absl::Status s =
              post(true, peer, kPayloadTag, out_payload[peer].data(), out_length[peer]);
          !s.ok()) {
        return s;
      }
    }
    if (in_length[peer] > 0) {
      in_payload[peer].resize(in_length[peer]);
      if (absl::Status s = post(false, peer, kPayloadTag, in_payload[peer].data(), in_length[peer]);
          !s.ok()) {
        return s;
      }
    }
  }
  if (absl::Status s = WaitAll(ops, timeout); !s.ok()) return s;

  std::map<std::string, std::string> received;
  for (int peer = 0; peer < n; ++peer) {
    size_t pos = 0;
    for (const MovePlan::Item* item : Between(plan, peer, me)) {
      uint64_t len = 0;
      if (!ReadU64(in_payload[peer], &pos, &len) || in_payload[peer].size() - pos < len) {
        return absl::DataLossError(
            absl::StrCat("state from member ", peer, " is truncated at \"", item->name, "\""));
      }
      received[item->name] = in_payload[peer].substr(pos, len);
      pos += len;
    }
    if (pos != in_payload[peer].size()) {
      return absl::DataLossError(absl::StrCat("state from member ", peer, " has ",
                                              in_payload[peer].size() - pos, " extra bytes"));
    }
  }
  return received;
}

}  // namespace pipeplan::worker
