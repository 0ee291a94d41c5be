#include "flags.h"

#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pipeplan::cli {

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                                   const std::set<std::string>& valued,
                                   const std::set<std::string>& switches,
                                   const Aliases& deprecated) {
  Flags flags;
  std::map<std::string, std::string> spelled;  // flag -> the name it was given under
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      flags.positionals_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const std::string typed = name;
    if (auto alias = deprecated.find(name);
        alias != deprecated.end() && valued.count(alias->second) > 0) {
      std::cerr << "pipeplan: --" << name << " is deprecated; use --" << alias->second << "\n";
      name = alias->second;
    }
    if (auto [it, first] = spelled.emplace(name, typed); !first && it->second != typed) {
      return absl::InvalidArgumentError(absl::StrCat("give --", name,
                                                     " or its deprecated alias, not both (--",
                                                     it->second, " and --", typed, ")"));
    }
    if (switches.count(name)) {
      if (value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      flags.values_[name] = "true";
    } else if (valued.count(name)) {
      if (!value) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        }
        value = args[++i];
      }
      flags.values_[name] = *value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  return flags;
}

std::optional<std::string> Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> Flags::Require(const std::string& name) const {
  auto v = Get(name);
  if (!v) return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
  return *v;
}

absl::StatusOr<int> Flags::GetInt(const std::string& name, int fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  int out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants an integer, got \"", *v, "\""));
  }
  return out;
}

absl::StatusOr<double> Flags::GetDouble(const std::string& name, double fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  double out;
  if (!absl::SimpleAtod(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants a number, got \"", *v, "\""));
  }
  return out;
}

}  // namespace pipeplan::cli
