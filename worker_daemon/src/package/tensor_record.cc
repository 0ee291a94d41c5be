#include "pipeplan/worker/package/tensor_record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "byte_fields.h"

namespace pipeplan::worker {
namespace {

constexpr uint32_t kMagic = 0x31545050;  // "PPT1"

std::string Header(const std::string& label, const std::vector<TensorMeta>& metas,
                   const std::vector<size_t>& offsets) {
  std::string h;
  PutField(h, kMagic);
  PutField(h, static_cast<uint32_t>(metas.size()));
  PutString(h, label);
  for (size_t i = 0; i < metas.size(); ++i) {
    const TensorMeta& m = metas[i];
    PutString(h, m.key);
    PutField(h, m.dtype);
    PutField(h, m.element_size);
    PutField(h, static_cast<uint32_t>(m.shape.size()));
    for (int64_t d : m.shape) PutField(h, d);
    PutField(h, static_cast<uint64_t>(i < offsets.size() ? offsets[i] : 0));
  }
  return h;
}

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("not a tensor record: ", what));
}

}  // namespace

uint64_t TensorMeta::NumBytes() const {
  uint64_t n = static_cast<uint64_t>(element_size);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

RecordLayout LayOutRecord(const std::string& label, const std::vector<TensorMeta>& metas) {
  // The header's size does not depend on the offsets' values.
  const size_t header = Header(label, metas, {}).size();
  RecordLayout layout;
  size_t at = AlignUp(header);
  for (const TensorMeta& m : metas) {
    layout.offsets.push_back(at);
    at = AlignUp(at + m.NumBytes());
  }
  layout.total = at;
  return layout;
}

void WriteRecordHeader(const std::string& label, const std::vector<TensorMeta>& metas,
                       const RecordLayout& layout, std::span<std::byte> out) {
  const std::string h = Header(label, metas, layout.offsets);
  std::memcpy(out.data(), h.data(), h.size());
}

absl::StatusOr<ParsedRecord> ParseRecord(std::span<const std::byte> record) {
  FieldReader in(record);
  if (in.Get<uint32_t>() != kMagic || !in.ok()) return Bad("bad magic");
  const uint32_t count = in.Get<uint32_t>();
  ParsedRecord out;
  out.label = in.GetString();
  for (uint32_t i = 0; i < count && in.ok(); ++i) {
    TensorSlice t;
    t.meta.key = in.GetString();
    t.meta.dtype = in.Get<int32_t>();
    t.meta.element_size = in.Get<int32_t>();
    const uint32_t ndim = in.Get<uint32_t>();
    if (!in.ok() || ndim > 64 || t.meta.element_size <= 0) return Bad("a bad tensor header");
    for (uint32_t d = 0; d < ndim; ++d) {
      const int64_t extent = in.Get<int64_t>();
      if (extent < 0) return Bad(absl::StrCat("tensor \"", t.meta.key, "\" has a negative extent"));
      t.meta.shape.push_back(extent);
    }
    const uint64_t offset = in.Get<uint64_t>();
    const uint64_t bytes = t.meta.NumBytes();
    if (!in.ok() || offset > record.size() || record.size() - offset < bytes) {
      return Bad(absl::StrCat("tensor \"", t.meta.key, "\" runs past the record's ", record.size(),
                              " bytes"));
    }
    t.data = record.subspan(offset, bytes);
    out.tensors.push_back(std::move(t));
  }
  if (!in.ok()) return Bad("the header runs past the record");
  return out;
}

}  // namespace pipeplan::worker
