// The one command-line parser of every pipeplan binary (the `pipeplan` CLI
// and its subcommands, pipeplan-planner, pipeplan-worker). Flags are
// declared with their value name, help line and deprecated aliases, so a
// typo is a usage error naming the flag and --help is generated from the
// same declarations it parses with.
//
//   FlagSet flags("pipeplan");
//   flags.Value("graph", "FILE", "model graph JSON")
//       .Value("ranks", "P", "pipeline ranks").Alias("stages");
//   PIPEPLAN_ASSIGN_OR_RETURN(ParsedFlags f, flags.Parse(args));
//   if (f.help_requested()) std::cout << flags.Help();
//
// Accepted forms: `--name value`, `--name=value`, `-x value`, `-x=value`,
// `-xvalue` (declared one-letter names), `--switch`; `--` ends the flags.
// Every error is a common::UsageError (exit code 2) that names the flag.
//
// Why not absl::flags: Abseil 20220623 exits 1 (not 0) for --help and 1
// (not 2) for a bad flag, and keeps one process-wide flag registry, where
// the CLI needs a flag set per subcommand.
#ifndef PIPEPLAN_COMMON_FLAG_SET_H_
#define PIPEPLAN_COMMON_FLAG_SET_H_

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pipeplan::common {

// One declared flag.
struct FlagSpec {
  std::string name;        // without dashes: "ranks"
  std::string value_name;  // "P"; empty for a switch, which takes no value
  std::string help;        // may span lines ("\n"); continuation lines are indented
  char short_name = 0;     // 'o' for -o; 0 for none
  std::vector<std::string> deprecated_aliases;  // old names that still set it
};

// What Parse found. Getters convert values and fail with a UsageError that
// names the flag ("--ranks wants an integer, got \"x\"").
class ParsedFlags {
 public:
  bool help_requested() const { return help_requested_; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  absl::StatusOr<std::string> Require(const std::string& name) const;
  absl::StatusOr<int> GetInt(const std::string& name, int fallback) const;
  absl::StatusOr<int64_t> GetInt64(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;
  // One of `choices` (compared exactly).
  absl::StatusOr<std::string> GetChoice(const std::string& name,
                                        const std::vector<std::string>& choices,
                                        const std::string& fallback) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  // Arguments Parse read (all of them unless it stopped at a positional).
  size_t consumed() const { return consumed_; }

  // Range-checked reads into a program's settings, so every binary checks
  // and words a bad value alike. Each leaves *out as it is when the flag is
  // absent, and is a UsageError naming the flag and the range when the value
  // is outside it.
  //
  // An integer from `least` to T's largest: one past T's range is refused,
  // not wrapped (a limit of 2^32 must not become 0).
  template <typename T>
  absl::Status ReadInteger(const std::string& name, int64_t least, T* out) const;
  // A finite number above 0 or, with allow_zero, from 0.
  absl::Status ReadNumber(const std::string& name, bool allow_zero, double* out) const;
  // ReadNumber's number, as seconds.
  absl::Status ReadSeconds(const std::string& name, bool allow_zero, absl::Duration* out) const;

 private:
  friend class FlagSet;
  // ReadInteger of a given flag, in [least, most].
  absl::Status ReadIntegerIn(const std::string& name, int64_t least, int64_t most,
                             int64_t* out) const;

  std::map<std::string, std::string> values_;  // canonical name -> value ("true" for switches)
  std::vector<std::string> positionals_;
  size_t consumed_ = 0;
  bool help_requested_ = false;
};

template <typename T>
absl::Status ParsedFlags::ReadInteger(const std::string& name, int64_t least, T* out) const {
  constexpr int64_t kMost = std::in_range<int64_t>(std::numeric_limits<T>::max())
                                ? static_cast<int64_t>(std::numeric_limits<T>::max())
                                : std::numeric_limits<int64_t>::max();
  if (!Has(name)) return absl::OkStatus();
  int64_t v = 0;
  absl::Status s = ReadIntegerIn(name, least, kMost, &v);
  if (s.ok()) *out = static_cast<T>(v);
  return s;
}

class FlagSet {
 public:
  // `program` prefixes the deprecation notes Parse prints on stderr.
  explicit FlagSet(std::string program);

  const std::string& program() const { return program_; }

  // Starts a help section ("global flags"); flags before any have "flags".
  FlagSet& Section(std::string title);
  FlagSet& Value(std::string name, std::string value_name, std::string help);
  FlagSet& Switch(std::string name, std::string help);
  // Both apply to the flag added last. An alias sets that flag and prints a
  // deprecation note on stderr; giving a flag and its alias is an error.
  FlagSet& Short(char letter);
  FlagSet& Alias(std::string old_name);
  // Adds the flags of `other`, in its sections.
  FlagSet& Include(const FlagSet& other);

  enum class Mode {
    kAll,              // every argument; non-flags are positionals
    kUntilPositional,  // stop at the first non-flag (a command word)
  };
  // --help or -h (before `--`; in kUntilPositional before the stop) sets
  // help_requested() and nothing else is checked.
  absl::StatusOr<ParsedFlags> Parse(const std::vector<std::string>& args,
                                    Mode mode = Mode::kAll) const;

  bool Declares(std::string_view name) const;
  const std::vector<FlagSpec>& flags() const { return flags_; }
  // The flags, by section, one per line with their help.
  std::string Help() const;

 private:
  const FlagSpec* Find(std::string_view name, bool* deprecated) const;
  const FlagSpec* FindShort(char letter) const;
  std::string Suggestion(std::string_view name) const;
  // Reads the flag at args[*i] (and its value, advancing *i) into `out`.
  absl::Status ReadFlag(const std::vector<std::string>& args, size_t* i, ParsedFlags* out,
                        std::map<std::string, std::string>* spelled) const;

  std::string program_;
  std::vector<FlagSpec> flags_;
  std::vector<std::string> sections_;  // title of each flag's section, by index
  std::string current_section_ = "flags";
};

// Adds --tls-ca, --tls-cert, --tls-key and --token-file: how a client (the
// CLI, a worker) reaches a planner that wants TLS or a bearer token. Declared
// once, so every client spells and explains them alike.
void AddPlannerCredentialFlags(FlagSet* flags);

// The first thing every binary's main() does with its flags, so --help,
// --version and a bad flag look and exit alike in all of them. Parses `args`
// (argv without argv[0]) and returns them, or std::nullopt with *exit_code
// set for main to return:
//   --help      "usage: PROGRAM SYNOPSIS", a blank line and the flags' help
//               on stdout; 0
//   --version   (when `flags` declares it) VersionLine(PROGRAM) on stdout; 0
//   a bad flag  UsageFailure(PROGRAM, why); 2
// PROGRAM is flags.program().
std::optional<ParsedFlags> ParseMainFlags(const FlagSet& flags, absl::string_view synopsis,
                                          const std::vector<std::string>& args, int* exit_code);

// "PROGRAM: MESSAGE" and "run `PROGRAM [COMMAND ]--help` for usage" on
// stderr; returns kExitUsage (2) for main to exit with.
int UsageFailure(absl::string_view program, absl::string_view message,
                 absl::string_view command = "");

// The candidate closest to a mistyped `name` (at most two edits away, and
// fewer edits than the candidate has letters), or "" when none is: the
// "did you mean" of unknown flags and commands.
std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_FLAG_SET_H_
