// Fixed-size fields in the headers of tensor records and state packs:
// appended to a string, read back with bounds checks. Host byte order (the
// ranks of a job and the hosts reading its checkpoints are little-endian
// x86-64 or aarch64). Private to pipeplan_worker_package.
#ifndef PIPEPLAN_WORKER_SRC_PACKAGE_BYTE_FIELDS_H_
#define PIPEPLAN_WORKER_SRC_PACKAGE_BYTE_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

namespace pipeplan::worker {

inline constexpr size_t kBlobAlignment = 64;

inline size_t AlignUp(size_t n) {
  return (n + kBlobAlignment - 1) / kBlobAlignment * kBlobAlignment;
}

template <typename T>
void PutField(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

inline void PutString(std::string& out, const std::string& s) {
  PutField(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads fields from the front of `bytes`; every read after one that ran
// past the end fails too (ok() then stays false).
class FieldReader {
 public:
  explicit FieldReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <typename T>
  T Get() {
    T value{};
    if (!ok_ || bytes_.size() - pos_ < sizeof(T)) {
      ok_ = false;
      return value;
    }
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string GetString() {
    const uint32_t n = Get<uint32_t>();
    if (!ok_ || bytes_.size() - pos_ < n) {
      ok_ = false;
      return "";
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  bool ok() const { return ok_; }
  size_t position() const { return pos_; }

 private:
  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_PACKAGE_BYTE_FIELDS_H_
