// A small `--name value` / `--flag` parser for the CLI's subcommands: every
// flag must be declared, so a typo is an error rather than silently ignored.
#ifndef PIPEPLAN_CLIENT_CLI_FLAGS_H_
#define PIPEPLAN_CLIENT_CLI_FLAGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pipeplan::cli {

class Flags {
 public:
  // Old flag name -> the valued flag that replaced it.
  using Aliases = std::map<std::string, std::string>;

  // `valued` flags take a value (`--graph f.json` or `--graph=f.json`);
  // `switches` take none. Non-flag arguments are collected as positionals.
  // A `deprecated` alias sets the flag it names and prints a note on stderr
  // (so scripts written for the old name keep working); giving both the
  // alias and the flag is INVALID_ARGUMENT.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args,
                                     const std::set<std::string>& valued,
                                     const std::set<std::string>& switches,
                                     const Aliases& deprecated = {});

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  absl::StatusOr<std::string> Require(const std::string& name) const;
  absl::StatusOr<int> GetInt(const std::string& name, int fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_FLAGS_H_
