// One table per enum that both prints and parses its names, so that the name a
// value prints as and the names a parser accepts cannot drift apart (they used
// to be a switch and a chain of ifs, written twice per enum).
//
// Usage:
//   constexpr auto kNames = MakeEnumNames<Optimizer>(
//       "unknown", {{Optimizer::kSgd, "sgd"}, {Optimizer::kAdam, "adam"},
//                   {Optimizer::kAdam, "adamw"}});
//   kNames.Name(Optimizer::kAdam)        -> "adam" (the first entry wins)
//   kNames.Parse("AdamW", kIgnoreCase)   -> Optimizer::kAdam (later entries are
//                                           aliases the parser also accepts)
// EnumMap does the same for two enums (a wire enum and the core's), both ways.
// Header-only and without I/O, so the planning core may use it.
#ifndef PIPEPLAN_COMMON_ENUM_NAMES_H_
#define PIPEPLAN_COMMON_ENUM_NAMES_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pipeplan {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

enum class NameCase { kExact, kIgnoreCase };

template <typename E, std::size_t N>
struct EnumNames {
  std::string_view unknown;  // what Name() answers for a value not in the table
  std::array<EnumName<E>, N> entries;

  constexpr std::string_view Name(E value) const {
    for (const EnumName<E>& e : entries) {
      if (e.value == value) return e.name;
    }
    return unknown;
  }

  // The value named `name`, aliases included; nullopt when none is.
  constexpr std::optional<E> Parse(std::string_view name, NameCase name_case) const {
    for (const EnumName<E>& e : entries) {
      if (name_case == NameCase::kExact ? e.name == name : EqualsIgnoringCase(e.name, name)) {
        return e.value;
      }
    }
    return std::nullopt;
  }

  // The printed names (aliases left out) in table order, joined by `separator`:
  // the list an error message offers.
  std::string List(std::string_view separator) const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (Name(entries[i].value) != entries[i].name) continue;  // an alias
      if (!out.empty()) out += separator;
      out += entries[i].name;
    }
    return out;
  }

 private:
  static constexpr char Lower(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }
  static constexpr bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (Lower(a[i]) != Lower(b[i])) return false;
    }
    return true;
  }
};

// Builds the table; E is named, N is counted: MakeEnumNames<E>("?", {{...}}).
template <typename E, std::size_t N>
constexpr EnumNames<E, N> MakeEnumNames(std::string_view unknown, const EnumName<E> (&entries)[N]) {
  EnumNames<E, N> names{unknown, {}};
  for (std::size_t i = 0; i < N; ++i) names.entries[i] = entries[i];
  return names;
}

// One enum's values paired with another's (a wire enum and the core's), read
// both ways; the first pair of a value wins.
template <typename A, typename B>
struct EnumPair {
  A a;
  B b;
};

template <typename A, typename B, std::size_t N>
struct EnumMap {
  std::array<EnumPair<A, B>, N> pairs;

  constexpr std::optional<B> Forward(A a) const {
    for (const EnumPair<A, B>& p : pairs) {
      if (p.a == a) return p.b;
    }
    return std::nullopt;
  }
  constexpr std::optional<A> Backward(B b) const {
    for (const EnumPair<A, B>& p : pairs) {
      if (p.b == b) return p.a;
    }
    return std::nullopt;
  }
};

// MakeEnumMap<A, B>({{a1, b1}, {a2, b2}}).
template <typename A, typename B, std::size_t N>
constexpr EnumMap<A, B, N> MakeEnumMap(const EnumPair<A, B> (&pairs)[N]) {
  EnumMap<A, B, N> map{};
  for (std::size_t i = 0; i < N; ++i) map.pairs[i] = pairs[i];
  return map;
}

// Parses `name` ignoring case; otherwise INVALID_ARGUMENT
// `unknown <what> "<name in lower case>" (<the choices>)`.
template <typename E, std::size_t N>
absl::StatusOr<E> ParseEnumName(const EnumNames<E, N>& table, std::string_view what,
                                std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (std::optional<E> value = table.Parse(lower, NameCase::kExact)) return *value;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", std::string(what), " \"", lower, "\" (", table.List(", "), ")"));
}

}  // namespace pipeplan

#endif  // PIPEPLAN_COMMON_ENUM_NAMES_H_
