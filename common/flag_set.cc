#include "pipeplan/common/flag_set.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/version.h"

namespace pipeplan::common {
namespace {

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h"; }

// A flag-looking argument: "--x..." or "-x..." (not "-" alone, not "--").
bool LooksLikeFlag(const std::string& arg) {
  return arg.size() >= 2 && arg[0] == '-' && arg != "--";
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// One argument split into the flag it names and its inline value, if any.
struct FlagToken {
  std::string spelled;  // as typed, for messages: "--ranks", "-o"
  std::string name;     // long name, or the one letter of a short flag
  bool is_short = false;
  std::optional<std::string> value;
};

FlagToken SplitFlag(const std::string& arg) {
  FlagToken t;
  if (arg.rfind("--", 0) == 0) {
    t.name = arg.substr(2);
    if (size_t eq = t.name.find('='); eq != std::string::npos) {
      t.value = t.name.substr(eq + 1);
      t.name = t.name.substr(0, eq);
    }
    t.spelled = "--" + t.name;
    return t;
  }
  t.is_short = true;
  t.name = arg.substr(1, 1);
  t.spelled = "-" + t.name;
  if (arg.size() > 2) t.value = arg.substr(arg[2] == '=' ? 3 : 2);
  return t;
}

// The value of --name read as a T, or `fallback` when the flag was not given.
template <typename T>
absl::StatusOr<T> ParseNumber(const std::string& name, const std::optional<std::string>& value,
                              T fallback) {
  if (!value) return fallback;
  T out{};
  if constexpr (std::is_floating_point_v<T>) {
    if (absl::SimpleAtod(*value, &out)) return out;
    return UsageError(absl::StrCat("--", name, " wants a number, got \"", *value, "\""));
  } else {
    if (absl::SimpleAtoi(*value, &out)) return out;
    return UsageError(absl::StrCat("--", name, " wants an integer, got \"", *value, "\""));
  }
}

}  // namespace

std::optional<std::string> ParsedFlags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> ParsedFlags::Require(const std::string& name) const {
  std::optional<std::string> v = Get(name);
  if (!v) return UsageError(absl::StrCat("--", name, " is required"));
  return *v;
}

absl::StatusOr<int> ParsedFlags::GetInt(const std::string& name, int fallback) const {
  return ParseNumber(name, Get(name), fallback);
}

absl::StatusOr<int64_t> ParsedFlags::GetInt64(const std::string& name, int64_t fallback) const {
  return ParseNumber(name, Get(name), fallback);
}

absl::StatusOr<double> ParsedFlags::GetDouble(const std::string& name, double fallback) const {
  return ParseNumber(name, Get(name), fallback);
}

absl::Status ParsedFlags::ReadIntegerIn(const std::string& name, int64_t least, int64_t most,
                                        int64_t* out) const {
  absl::StatusOr<int64_t> v = GetInt64(name, 0);
  if (!v.ok()) return v.status();
  if (*v < least || *v > most) {
    return UsageError(most == std::numeric_limits<int64_t>::max()
                          ? absl::StrCat("--", name, " wants an integer >= ", least, ", got ", *v)
                          : absl::StrCat("--", name, " wants an integer from ", least, " to ", most,
                                         ", got ", *v));
  }
  *out = *v;
  return absl::OkStatus();
}

absl::Status ParsedFlags::ReadNumber(const std::string& name, bool allow_zero, double* out) const {
  if (!Has(name)) return absl::OkStatus();
  absl::StatusOr<double> v = GetDouble(name, 0);
  if (!v.ok()) return v.status();
  if (!(allow_zero ? *v >= 0 : *v > 0) || !std::isfinite(*v)) {
    return UsageError(absl::StrCat("--", name, " wants a ",
                                   allow_zero ? "non-negative" : "positive", " number, got \"",
                                   values_.at(name), "\""));
  }
  *out = *v;
  return absl::OkStatus();
}

absl::Status ParsedFlags::ReadSeconds(const std::string& name, bool allow_zero,
                                      absl::Duration* out) const {
  if (!Has(name)) return absl::OkStatus();
  double seconds = 0;
  absl::Status s = ReadNumber(name, allow_zero, &seconds);
  if (s.ok()) *out = absl::Seconds(seconds);
  return s;
}

absl::StatusOr<std::string> ParsedFlags::GetChoice(const std::string& name,
                                                   const std::vector<std::string>& choices,
                                                   const std::string& fallback) const {
  std::optional<std::string> v = Get(name);
  if (!v) return fallback;
  if (std::find(choices.begin(), choices.end(), *v) == choices.end()) {
    return UsageError(
        absl::StrCat("--", name, " wants ", absl::StrJoin(choices, " or "), ", got \"", *v, "\""));
  }
  return *v;
}

FlagSet::FlagSet(std::string program) : program_(std::move(program)) {}

FlagSet& FlagSet::Section(std::string title) {
  current_section_ = std::move(title);
  return *this;
}

FlagSet& FlagSet::Value(std::string name, std::string value_name, std::string help) {
  flags_.push_back({std::move(name), std::move(value_name), std::move(help)});
  sections_.push_back(current_section_);
  return *this;
}

FlagSet& FlagSet::Switch(std::string name, std::string help) {
  flags_.push_back({std::move(name), "", std::move(help)});
  sections_.push_back(current_section_);
  return *this;
}

FlagSet& FlagSet::Short(char letter) {
  if (!flags_.empty()) flags_.back().short_name = letter;
  return *this;
}

FlagSet& FlagSet::Alias(std::string old_name) {
  if (!flags_.empty()) flags_.back().deprecated_aliases.push_back(std::move(old_name));
  return *this;
}

FlagSet& FlagSet::Include(const FlagSet& other) {
  for (size_t i = 0; i < other.flags_.size(); ++i) {
    if (Declares(other.flags_[i].name)) continue;
    flags_.push_back(other.flags_[i]);
    sections_.push_back(other.sections_[i]);
  }
  return *this;
}

bool FlagSet::Declares(std::string_view name) const {
  bool deprecated = false;
  return Find(name, &deprecated) != nullptr;
}

const FlagSpec* FlagSet::Find(std::string_view name, bool* deprecated) const {
  *deprecated = false;
  for (const FlagSpec& f : flags_) {
    if (f.name == name) return &f;
  }
  for (const FlagSpec& f : flags_) {
    for (const std::string& alias : f.deprecated_aliases) {
      if (alias == name) {
        *deprecated = true;
        return &f;
      }
    }
  }
  return nullptr;
}

const FlagSpec* FlagSet::FindShort(char letter) const {
  for (const FlagSpec& f : flags_) {
    if (f.short_name != 0 && f.short_name == letter) return &f;
  }
  return nullptr;
}

std::string FlagSet::Suggestion(std::string_view name) const {
  std::vector<std::string> names;
  for (const FlagSpec& f : flags_) names.push_back(f.name);
  const std::string best = ClosestName(name, names);
  return best.empty() ? "" : absl::StrCat("; did you mean --", best, "?");
}

std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = 3;  // suggest only close names
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(name, c);
    if (d < best_distance && d < c.size()) {
      best = &c;
      best_distance = d;
    }
  }
  return best ? *best : "";
}

absl::Status FlagSet::ReadFlag(const std::vector<std::string>& args, size_t* i, ParsedFlags* out,
                               std::map<std::string, std::string>* spelled) const {
  FlagToken token = SplitFlag(args[*i]);
  bool deprecated = false;
  const FlagSpec* spec = token.is_short ? FindShort(token.name[0]) : Find(token.name, &deprecated);
  if (spec == nullptr) {
    return UsageError(
        absl::StrCat("unknown flag ", token.spelled, token.is_short ? "" : Suggestion(token.name)));
  }
  if (deprecated) {
    std::cerr << program_ << ": " << token.spelled << " is deprecated; use --" << spec->name
              << "\n";
  }
  if (auto [it, first] = spelled->emplace(spec->name, token.spelled);
      !first && it->second != token.spelled) {
    return UsageError(absl::StrCat("give --", spec->name, " or its deprecated alias, not both (",
                                   it->second, " and ", token.spelled, ")"));
  }
  if (spec->value_name.empty()) {
    if (token.value) return UsageError(absl::StrCat(token.spelled, " takes no value"));
    out->values_[spec->name] = "true";
    return absl::OkStatus();
  }
  if (!token.value) {
    if (*i + 1 >= args.size()) return UsageError(absl::StrCat(token.spelled, " needs a value"));
    token.value = args[++*i];
  }
  out->values_[spec->name] = *token.value;
  return absl::OkStatus();
}

absl::StatusOr<ParsedFlags> FlagSet::Parse(const std::vector<std::string>& args, Mode mode) const {
  ParsedFlags out;
  if (mode == Mode::kAll) {
    for (const std::string& arg : args) {
      if (arg == "--") break;
      if (IsHelp(arg)) {
        out.help_requested_ = true;
        out.consumed_ = args.size();
        return out;
      }
    }
  }
  std::map<std::string, std::string> spelled;  // canonical name -> as it was typed
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      if (mode == Mode::kAll) {
        out.positionals_.insert(out.positionals_.end(), args.begin() + i + 1, args.end());
        i = args.size();
      }
      break;
    }
    if (!LooksLikeFlag(arg)) {
      if (mode == Mode::kUntilPositional) break;
      out.positionals_.push_back(arg);
      continue;
    }
    if (IsHelp(arg)) {
      out.help_requested_ = true;
      out.consumed_ = i + 1;
      return out;
    }
    absl::Status status = ReadFlag(args, &i, &out, &spelled);
    if (!status.ok()) return status;
  }
  out.consumed_ = i;
  return out;
}

std::string FlagSet::Help() const {
  std::vector<std::string> order;  // section titles in first-use order
  for (const std::string& s : sections_) {
    if (std::find(order.begin(), order.end(), s) == order.end()) order.push_back(s);
  }
  std::string out;
  for (const std::string& section : order) {
    absl::StrAppend(&out, out.empty() ? "" : "\n", section, ":\n");
    for (size_t i = 0; i < flags_.size(); ++i) {
      if (sections_[i] != section) continue;
      const FlagSpec& f = flags_[i];
      std::string left = f.short_name ? absl::StrCat("-", std::string(1, f.short_name), ", --")
                                      : std::string("--");
      absl::StrAppend(&left, f.name, f.value_name.empty() ? "" : " ", f.value_name);
      std::string help = f.help;
      for (const std::string& alias : f.deprecated_aliases) {
        absl::StrAppend(&help, "\n(--", alias, " is a deprecated alias)");
      }
      const std::vector<std::string> lines = absl::StrSplit(help, '\n');
      constexpr size_t kColumn = 30;  // where help text starts
      std::string line = absl::StrCat("  ", left);
      line += line.size() + 1 < kColumn ? std::string(kColumn - line.size(), ' ')
                                        : absl::StrCat("\n", std::string(kColumn, ' '));
      absl::StrAppend(&out, line, lines[0], "\n");
      for (size_t l = 1; l < lines.size(); ++l) {
        absl::StrAppend(&out, std::string(kColumn, ' '), lines[l], "\n");
      }
    }
  }
  return out;
}

void AddPlannerCredentialFlags(FlagSet* flags) {
  flags->Value("tls-ca", "FILE", "PEM CA of the planner's certificate (enables TLS)")
      .Value("tls-cert", "FILE", "client certificate for mutual TLS (with --tls-key)")
      .Value("tls-key", "FILE", "its private key")
      .Value("token-file", "FILE", "bearer token for the planner (first line of FILE)");
}

std::optional<ParsedFlags> ParseMainFlags(const FlagSet& flags, absl::string_view synopsis,
                                          const std::vector<std::string>& args, int* exit_code) {
  absl::StatusOr<ParsedFlags> parsed = flags.Parse(args);
  if (!parsed.ok()) {
    *exit_code = UsageFailure(flags.program(), parsed.status().message());
    return std::nullopt;
  }
  if (parsed->help_requested()) {
    std::cout << "usage: " << flags.program() << " " << synopsis << "\n\n" << flags.Help();
    *exit_code = kExitOk;
    return std::nullopt;
  }
  if (parsed->Has("version")) {
    std::cout << VersionLine(flags.program());
    *exit_code = kExitOk;
    return std::nullopt;
  }
  return *std::move(parsed);
}

int UsageFailure(absl::string_view program, absl::string_view message, absl::string_view command) {
  std::cerr << program << ": " << message << "\nrun `" << program << " " << command
            << (command.empty() ? "" : " ") << "--help` for usage\n";
  return kExitUsage;
}

}  // namespace pipeplan::common
