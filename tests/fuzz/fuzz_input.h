// Reads typed values off a fuzzer's input bytes, for structure-aware
// targets: each call consumes bytes, and once they run out every value is
// zero (or empty), so any input decodes to something.
#ifndef PIPEPLAN_TESTS_FUZZ_FUZZ_INPUT_H_
#define PIPEPLAN_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace pipeplan::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // In [lo, hi]; REQUIRES: hi - lo < 256.
  int Int(int lo, int hi) { return lo + Byte() % (hi - lo + 1); }
  // Mostly small, sometimes one of the edges of int64.
  int64_t Count(int64_t small) {
    switch (Byte() % 16) {
      case 0:
        return -1;
      case 1:
        return std::numeric_limits<int32_t>::max();
      case 2:
        return std::numeric_limits<int64_t>::max();
      case 3:
        return std::numeric_limits<int64_t>::min();
      default:
        return Byte() % (small + 1);
    }
  }
  // Zero, negative, NaN, infinity, huge or an ordinary positive value.
  double Number() {
    switch (Byte() % 8) {
      case 0:
        return 0;
      case 1:
        return -1;
      case 2:
        return std::numeric_limits<double>::quiet_NaN();
      case 3:
        return std::numeric_limits<double>::infinity();
      case 4:
        return 1e300;
      default:
        return (Byte() + 1) * std::pow(10.0, Int(0, 14));
    }
  }
  // "n<k>" for k in [0, range]: ids that collide on purpose.
  std::string Id(int range) { return absl::StrCat("n", Int(0, range)); }
  // Up to `most` raw bytes (any byte values), length from the input.
  std::string Text(size_t most) {
    size_t n = Byte();
    if (n == 255) n = most;  // now and then the longest
    n = std::min({n, most, size_ - std::min(pos_, size_)});
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  // Everything not read yet.
  std::string Rest() {
    std::string out = pos_ < size_
                          ? std::string(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_)
                          : std::string();
    pos_ = size_;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

}  // namespace pipeplan::fuzz

#endif  // PIPEPLAN_TESTS_FUZZ_FUZZ_INPUT_H_
