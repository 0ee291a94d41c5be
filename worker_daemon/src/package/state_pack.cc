#include "pipeplan/worker/package/state_pack.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "byte_fields.h"

namespace pipeplan::worker {
namespace {

constexpr char kMagic[8] = {'P', 'P', 'S', 'T', 'A', 'T', 'E', '1'};

std::string Header(const std::map<std::string, size_t>& sizes, const std::vector<size_t>& offsets) {
  std::string h(kMagic, sizeof(kMagic));
  PutField(h, static_cast<uint64_t>(sizes.size()));
  size_t i = 0;
  for (const auto& [name, size] : sizes) {
    PutString(h, name);
    PutField(h, static_cast<uint64_t>(i < offsets.size() ? offsets[i] : 0));
    PutField(h, static_cast<uint64_t>(size));
    ++i;
  }
  return h;
}

}  // namespace

size_t PackSize(const std::map<std::string, size_t>& sizes) {
  size_t at = AlignUp(Header(sizes, {}).size());
  for (const auto& [name, size] : sizes) at = AlignUp(at + size);
  return at;
}

std::map<std::string, std::span<std::byte>> StartPack(const std::map<std::string, size_t>& sizes,
                                                      StatePack& pack) {
  std::vector<size_t> offsets;
  size_t at = AlignUp(Header(sizes, {}).size());
  for (const auto& [name, size] : sizes) {
    offsets.push_back(at);
    at = AlignUp(at + size);
  }
  // resize() keeps the memory (and skips zeroing) when the size is the
  // same as the last round's.
  pack.bytes.resize(at);
  const std::string h = Header(sizes, offsets);
  std::memcpy(pack.bytes.data(), h.data(), h.size());
  std::map<std::string, std::span<std::byte>> out;
  pack.views.clear();
  size_t i = 0;
  for (const auto& [name, size] : sizes) {
    std::span<std::byte> blob(pack.bytes.data() + offsets[i++], size);
    out[name] = blob;
    pack.views[name] = blob;
  }
  return out;
}

bool LooksLikeStatePack(std::span<const std::byte> bytes) {
  return bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0;
}

absl::StatusOr<NamedStateView> ParseStatePack(std::span<const std::byte> bytes) {
  if (!LooksLikeStatePack(bytes)) return absl::InvalidArgumentError("not a state pack: bad magic");
  FieldReader in(bytes.subspan(sizeof(kMagic)));
  const uint64_t count = in.Get<uint64_t>();
  NamedStateView out;
  for (uint64_t i = 0; i < count && in.ok(); ++i) {
    std::string name = in.GetString();
    const uint64_t offset = in.Get<uint64_t>();
    const uint64_t size = in.Get<uint64_t>();
    if (!in.ok()) break;
    if (offset > bytes.size() || bytes.size() - offset < size) {
      return absl::InvalidArgumentError(
          absl::StrCat("state pack: blob \"", name, "\" runs past its ", bytes.size(), " bytes"));
    }
    out[std::move(name)] = bytes.subspan(offset, size);
  }
  if (!in.ok()) return absl::InvalidArgumentError("state pack: the header runs past the end");
  return out;
}

}  // namespace pipeplan::worker
