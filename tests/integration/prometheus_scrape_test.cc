// A real Prometheus server scrapes a real pipeplan-planner, both on 127.0.0.1,
// with the shipped deploy/prometheus/prometheus.yml (target and intervals
// substituted) and deploy/prometheus/alerts.yml. The deploy files are also
// checked with promtool when it is installed. Skipped when there is no
// Prometheus binary (Debian: `apt-get install prometheus`, see
// scripts/setup.sh). Prometheus' HTTP API is read with a small HTTP/1.1
// client over a POSIX socket; its JSON is parsed as google.protobuf.Struct.
#include <arpa/inet.h>
#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "planner_process.h"

namespace pipeplan::testing {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr char kDefaultPrometheus[] = "/usr/bin/prometheus";
constexpr char kDefaultPromtool[] = "/usr/bin/promtool";
constexpr char kJobName[] = "pipeplan-planner";
// How long Prometheus gets to start and to show the scraped values.
constexpr absl::Duration kStartBudget = absl::Seconds(15);
constexpr absl::Duration kScrapeBudget = absl::Seconds(30);
constexpr absl::Duration kPollInterval = absl::Milliseconds(250);
constexpr int kMaxPolls = 120;

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : fallback;
}

std::string PrometheusBin() { return Env("PIPEPLAN_PROMETHEUS_BIN", kDefaultPrometheus); }
std::string PromtoolBin() { return Env("PIPEPLAN_PROMTOOL_BIN", kDefaultPromtool); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::trunc);
  out << contents;
  return static_cast<bool>(out);
}

// Replaces `from` by `to`; false unless `from` occurs exactly once.
bool ReplaceOnce(std::string* s, std::string_view from, std::string_view to) {
  const size_t at = s->find(from);
  if (at == std::string::npos || s->find(from, at + 1) != std::string::npos) return false;
  s->replace(at, from.size(), to);
  return true;
}

// `yaml` without its whole-line comments (so substitutions only see config).
std::string StripCommentLines(const std::string& yaml) {
  std::istringstream in(yaml);
  std::string line, out;
  while (std::getline(in, line)) {
    if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) continue;
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string Tail(const std::string& s, size_t n = 4000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

// A port that was free on 127.0.0.1 a moment ago (bind to port 0, close).
int PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

struct HttpResponse {
  int status = 0;
  std::string body;
};

// Decodes a chunked body; false if it is malformed or cut short.
bool Dechunk(std::string_view in, std::string* out) {
  out->clear();
  size_t pos = 0;
  while (true) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) return false;
    std::string size_text(in.substr(pos, eol - pos));
    if (const size_t semi = size_text.find(';'); semi != std::string::npos) {
      size_text.resize(semi);
    }
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size)) return false;
    pos = eol + 2;
    if (size == 0) return true;
    if (in.size() < pos + size + 2) return false;
    out->append(in.substr(pos, size));
    pos += size + 2;
  }
}

// GET http://127.0.0.1:`port``target` over HTTP/1.1 with Connection: close.
// Reads until the server closes; handles Content-Length and chunked bodies.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& target,
                                     absl::Duration timeout = absl::Seconds(5)) {
  constexpr size_t kMaxResponse = 16 << 20;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const absl::Time deadline = absl::Now() + timeout;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout));
  tv.tv_usec =
      static_cast<suseconds_t>(absl::ToInt64Microseconds(timeout - absl::Seconds(tv.tv_sec)));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", std::strerror(e)));
  }
  const std::string request = absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
                                           "\r\nAccept: application/json\r\n"
                                           "Connection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("send failed");
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[8192];
  while (true) {
    if (absl::Now() > deadline) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat("GET ", target, ": no complete answer"));
    }
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("GET ", target, ": ", std::strerror(e)));
    }
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > kMaxResponse) {
      close(fd);
      return absl::ResourceExhaustedError("response too large");
    }
  }
  close(fd);

  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return absl::DataLossError("no end of headers: " + Tail(raw));
  const std::string head = raw.substr(0, head_end);
  const std::string_view rest = std::string_view(raw).substr(head_end + 4);
  HttpResponse r;
  // "HTTP/1.1 200 OK"
  const size_t sp = head.find(' ');
  if (!absl::StartsWith(head, "HTTP/1.") || sp == std::string::npos ||
      !absl::SimpleAtoi(head.substr(sp + 1, 3), &r.status)) {
    return absl::DataLossError("bad status line: " + head.substr(0, head.find('\r')));
  }
  bool chunked = false;
  long long content_length = -1;
  std::istringstream lines(head);
  std::string line;
  std::getline(lines, line);  // status line
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
    const std::string value =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (name == "transfer-encoding" && absl::StrContains(value, "chunked")) chunked = true;
    if (name == "content-length") (void)absl::SimpleAtoi(value, &content_length);
  }
  if (chunked) {
    if (!Dechunk(rest, &r.body)) return absl::DataLossError("bad chunked body");
  } else if (content_length >= 0) {
    if (rest.size() < static_cast<size_t>(content_length)) {
      return absl::DataLossError("body shorter than Content-Length");
    }
    r.body = std::string(rest.substr(0, static_cast<size_t>(content_length)));
  } else {
    r.body = std::string(rest);
  }
  return r;
}

// GET + parse a Prometheus API answer ({"status":"success","data":...}).
absl::StatusOr<Struct> ApiGet(int port, const std::string& target, std::string* raw_body) {
  absl::StatusOr<HttpResponse> r = HttpGet(port, target);
  if (!r.ok()) return r.status();
  if (raw_body != nullptr) *raw_body = r->body;
  if (r->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", target, ": HTTP ", r->status, " ", r->body));
  }
  Struct s;
  if (!google::protobuf::util::JsonStringToMessage(r->body, &s).ok()) {
    return absl::DataLossError("not JSON: " + Tail(r->body));
  }
  const auto it = s.fields().find("status");
  if (it == s.fields().end() || it->second.string_value() != "success") {
    return absl::UnavailableError("API error: " + Tail(r->body));
  }
  return s;
}

const Value* Field(const Struct& s, const std::string& name) {
  const auto it = s.fields().find(name);
  return it == s.fields().end() ? nullptr : &it->second;
}

std::string StringField(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  return v == nullptr ? "" : v->string_value();
}

struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Instant vector of `query`, or an error (also when the answer is no vector).
absl::StatusOr<std::vector<Sample>> Query(int port, const std::string& query, std::string* raw) {
  absl::StatusOr<Struct> s = ApiGet(port, "/api/v1/query?query=" + UrlEncode(query), raw);
  if (!s.ok()) return s.status();
  const Value* data = Field(*s, "data");
  if (data == nullptr || StringField(data->struct_value(), "resultType") != "vector") {
    return absl::DataLossError("no vector result");
  }
  std::vector<Sample> out;
  const Value* result = Field(data->struct_value(), "result");
  if (result == nullptr) return out;
  for (const Value& item : result->list_value().values()) {
    Sample sample;
    if (const Value* m = Field(item.struct_value(), "metric")) {
      for (const auto& [k, v] : m->struct_value().fields()) sample.labels[k] = v.string_value();
    }
    const Value* v = Field(item.struct_value(), "value");  // [ts, "value"]
    if (v == nullptr || v->list_value().values_size() != 2 ||
        !absl::SimpleAtod(v->list_value().values(1).string_value(), &sample.value)) {
      return absl::DataLossError("bad sample value");
    }
    out.push_back(std::move(sample));
  }
  return out;
}

// Every query of the Grafana dashboard at `path` as (panel title, PromQL),
// nested row panels included, with Grafana's variables replaced by what a
// plain query accepts: intervals by 1m/5m, template variables by ".*".
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> DashboardQueries(
    const std::string& path) {
  Struct dashboard;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &dashboard).ok()) {
    return absl::DataLossError(path + " is not JSON");
  }
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<const Value*> panels;
  if (const Value* top = Field(dashboard, "panels")) panels.push_back(top);
  while (!panels.empty()) {
    const Value* list = panels.back();
    panels.pop_back();
    for (const Value& p : list->list_value().values()) {
      if (const Value* inner = Field(p.struct_value(), "panels")) panels.push_back(inner);
      const Value* targets = Field(p.struct_value(), "targets");
      if (targets == nullptr) continue;
      for (const Value& t : targets->list_value().values()) {
        std::string expr = StringField(t.struct_value(), "expr");
        for (auto [from, to] :
             {std::pair{"$__rate_interval", "1m"}, {"$__interval", "1m"}, {"$__range", "5m"}}) {
          for (size_t at; (at = expr.find(from)) != std::string::npos;) {
            expr.replace(at, std::string_view(from).size(), to);
          }
        }
        for (size_t at; (at = expr.find('$')) != std::string::npos;) {
          size_t end = at + 1;
          if (end < expr.size() && expr[end] == '{') end = expr.find('}', end) + 1;
          while (end < expr.size() && (absl::ascii_isalnum(expr[end]) || expr[end] == '_')) ++end;
          expr.replace(at, end - at, ".*");
        }
        if (!expr.empty()) out.emplace_back(StringField(p.struct_value(), "title"), expr);
      }
    }
  }
  return out;
}

// A child process (no shell) with stdout and stderr in `log_path`. The
// destructor stops it (SIGTERM, then SIGKILL) and reaps it; nothing but this
// pid is ever signalled.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::vector<std::string> argv_s,
                                                             const std::string& log_path) {
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log < 0) return absl::InternalError("cannot open " + log_path);
    const pid_t pid = fork();
    if (pid < 0) {
      close(log);
      return absl::InternalError("fork failed");
    }
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      const int null_in = open("/dev/null", O_RDONLY);
      if (null_in >= 0) dup2(null_in, 0);
      dup2(log, 1);
      dup2(log, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(log);
    std::unique_ptr<ChildProcess> c(new ChildProcess());
    c->pid_ = pid;
    return c;
  }

  ~ChildProcess() { Stop(absl::Seconds(5)); }

  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return false;
    }
    return true;
  }

  // SIGTERM, up to `grace` to exit, then SIGKILL. Returns the exit code
  // (128+signal when killed by one).
  int Stop(absl::Duration grace) {
    if (!Running()) return exit_code_;
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (absl::Now() < deadline) {
      if (!Running()) return exit_code_;
      absl::SleepFor(absl::Milliseconds(20));
    }
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_code_ = 128 + SIGKILL;
    return exit_code_;
  }

  int exit_code() const { return exit_code_; }

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

struct RunningPrometheus {
  std::unique_ptr<ChildProcess> process;
  int port = 0;
  std::string log_path;
};

// Starts Prometheus on a free loopback port and waits for /-/ready. A port
// taken between PickFreePort and Prometheus' bind is retried with another.
absl::StatusOr<RunningPrometheus> StartPrometheus(const std::string& config,
                                                  const std::string& dir) {
  std::string last_log;
  for (int attempt = 0; attempt < 5; ++attempt) {
    RunningPrometheus p;
    p.port = PickFreePort();
    if (p.port == 0) return absl::UnavailableError("no free port on 127.0.0.1");
    p.log_path = absl::StrCat(dir, "/prometheus-", attempt, ".log");
    auto child = ChildProcess::Start(
        {PrometheusBin(), "--config.file=" + config,
         absl::StrCat("--storage.tsdb.path=", dir, "/tsdb-", attempt),
         absl::StrCat("--web.listen-address=127.0.0.1:", p.port), "--log.level=info"},
        p.log_path);
    if (!child.ok()) return child.status();
    p.process = *std::move(child);
    const absl::Time deadline = absl::Now() + kStartBudget;
    while (absl::Now() < deadline && p.process->Running()) {
      absl::StatusOr<HttpResponse> r = HttpGet(p.port, "/-/ready", absl::Seconds(2));
      if (r.ok() && r->status == 200) return p;
      absl::SleepFor(absl::Milliseconds(100));
    }
    const bool exited = !p.process->Running();
    p.process->Stop(absl::Seconds(5));
    last_log = ReadFile(p.log_path);
    if (!(exited && absl::StrContains(last_log, "address already in use"))) {
      return absl::UnavailableError(absl::StrCat("prometheus did not become ready (exit ",
                                                 p.process->exit_code(), "):\n", Tail(last_log)));
    }
  }
  return absl::UnavailableError("prometheus: no free port after 5 tries:\n" + Tail(last_log));
}

TEST(PrometheusScrape, HttpClientDechunksBodies) {
  std::string body;
  ASSERT_TRUE(Dechunk("4\r\n{\"a\"\r\n5;ext=1\r\n:1}  \r\n0\r\n\r\n", &body));
  EXPECT_EQ(body, "{\"a\":1}  ");
  ASSERT_TRUE(Dechunk("A\r\n0123456789\r\n0\r\n\r\n", &body));
  EXPECT_EQ(body, "0123456789");
  EXPECT_FALSE(Dechunk("5\r\nab", &body));            // cut short
  EXPECT_FALSE(Dechunk("zz\r\nab\r\n0\r\n", &body));  // not hex
  EXPECT_EQ(UrlEncode("up{job=\"x\"}"), "up%7Bjob%3D%22x%22%7D");
}

TEST(PrometheusScrape, ShippedConfigScrapesThePlannerAndRulesLoad) {
  const std::string prometheus_bin = PrometheusBin();
  if (access(prometheus_bin.c_str(), X_OK) != 0) {
    GTEST_SKIP() << prometheus_bin
                 << " not found: install the Prometheus server (Debian: apt-get install "
                    "prometheus; scripts/setup.sh does) or set PIPEPLAN_PROMETHEUS_BIN";
  }
  const absl::Time test_start = absl::Now();
  const std::string deploy = PIPEPLAN_DEPLOY_PROMETHEUS_DIR;
  const std::string template_text = ReadFile(deploy + "/prometheus.yml");
  const std::string alerts_text = ReadFile(deploy + "/alerts.yml");
  ASSERT_FALSE(template_text.empty()) << deploy << "/prometheus.yml";
  ASSERT_FALSE(alerts_text.empty()) << deploy << "/alerts.yml";

  // 1. The shipped files pass promtool (syntax, and the alert unit tests).
  const std::string promtool = PromtoolBin();
  const bool have_promtool = access(promtool.c_str(), X_OK) == 0;
  std::string out;
  if (have_promtool) {
    EXPECT_EQ(RunCommand({promtool, "check", "rules", deploy + "/alerts.yml"}, &out), 0) << out;
    EXPECT_EQ(RunCommand({promtool, "check", "config", deploy + "/prometheus.yml"}, &out), 0)
        << out;
    EXPECT_EQ(RunCommand({promtool, "test", "rules", deploy + "/alerts_test.yml"}, &out), 0) << out;
  } else {
    std::cerr << "promtool not found at " << promtool << "; skipping promtool checks\n";
  }

  // 2. A planner with a Plan and a job behind it.
  auto planner_or = PlannerProcess::Start({"--drain-seconds", "0"});
  ASSERT_TRUE(planner_or.ok()) << planner_or.status();
  std::unique_ptr<PlannerProcess> planner = *std::move(planner_or);
  ASSERT_GT(planner->metrics_port(), 0) << planner->stderr_text();
  {
    auto c = planner->Client();
    ASSERT_TRUE(c.ok()) << c.status();
    auto plan = (*c)->Plan(SmallRequest(), absl::Seconds(30));
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto job = (*c)->CreateJob("prometheus-scrape", SmallRequest());
    ASSERT_TRUE(job.ok()) << job.status();
  }
  const std::string target = absl::StrCat("127.0.0.1:", planner->metrics_port());

  // 3. The shipped config with the real target and 1 s intervals, next to a
  // copy of the shipped rules (rule_files is relative to the config file).
  TempDir dir;
  std::string config = StripCommentLines(template_text);
  ASSERT_TRUE(ReplaceOnce(&config, "scrape_interval: 15s", "scrape_interval: 1s")) << config;
  ASSERT_TRUE(ReplaceOnce(&config, "evaluation_interval: 15s", "evaluation_interval: 1s"))
      << config;
  ASSERT_TRUE(ReplaceOnce(&config, "- 127.0.0.1:7601", "- " + target)) << config;
  const std::string config_path = dir.path() + "/prometheus.yml";
  ASSERT_TRUE(WriteFile(config_path, config));
  ASSERT_TRUE(WriteFile(dir.path() + "/alerts.yml", alerts_text));
  if (have_promtool) {
    EXPECT_EQ(RunCommand({promtool, "check", "config", config_path}, &out), 0) << out;
  }

  // 4. Prometheus, and poll its API until the scraped values are there.
  auto prom_or = StartPrometheus(config_path, dir.path());
  ASSERT_TRUE(prom_or.ok()) << prom_or.status();
  RunningPrometheus prom = *std::move(prom_or);
  const absl::Time scrape_start = absl::Now();

  double jobs = -1, plan_ok = -1, create_ok = -1;
  std::string target_health, target_url, target_error, rules_seen;
  std::string jobs_raw, requests_raw, targets_raw, rules_raw, last_error;
  std::vector<std::string> alert_names;
  bool done = false;
  int polls = 0;
  for (; polls < kMaxPolls && absl::Now() - scrape_start < kScrapeBudget; ++polls) {
    if (polls > 0) absl::SleepFor(kPollInterval);
    ASSERT_TRUE(prom.process->Running()) << "prometheus exited:\n" << Tail(ReadFile(prom.log_path));

    absl::StatusOr<std::vector<Sample>> j = Query(prom.port, "pipeplan_jobs", &jobs_raw);
    if (!j.ok()) {
      last_error = j.status().ToString();
      continue;
    }
    for (const Sample& s : *j) {
      if (s.labels.count("job") && s.labels.at("job") == kJobName && s.labels.count("instance") &&
          s.labels.at("instance") == target) {
        jobs = s.value;
      }
    }
    absl::StatusOr<std::vector<Sample>> r =
        Query(prom.port, "pipeplan_plan_requests_total", &requests_raw);
    if (!r.ok()) {
      last_error = r.status().ToString();
      continue;
    }
    for (const Sample& s : *r) {
      if (!s.labels.count("code") || s.labels.at("code") != "OK" || !s.labels.count("method") ||
          !s.labels.count("instance") || s.labels.at("instance") != target) {
        continue;
      }
      if (s.labels.at("method") == "Plan") plan_ok = s.value;
      if (s.labels.at("method") == "CreateJob") create_ok = s.value;
    }
    absl::StatusOr<Struct> t = ApiGet(prom.port, "/api/v1/targets?state=active", &targets_raw);
    if (!t.ok()) {
      last_error = t.status().ToString();
      continue;
    }
    if (const Value* data = Field(*t, "data")) {
      if (const Value* active = Field(data->struct_value(), "activeTargets")) {
        for (const Value& at : active->list_value().values()) {
          const Struct& ts = at.struct_value();
          const Value* labels = Field(ts, "labels");
          if (labels == nullptr || StringField(labels->struct_value(), "job") != kJobName) continue;
          target_health = StringField(ts, "health");
          target_url = StringField(ts, "scrapeUrl");
          target_error = StringField(ts, "lastError");
        }
      }
    }
    if (jobs == 1 && plan_ok >= 1 && create_ok >= 1 && target_health == "up") {
      done = true;
      break;
    }
  }
  const absl::Duration to_values = absl::Now() - scrape_start;

  EXPECT_TRUE(done) << "after " << polls << " polls in " << to_values
                    << "; last error: " << last_error << "\njobs: " << Tail(jobs_raw)
                    << "\nrequests: " << Tail(requests_raw) << "\ntargets: " << Tail(targets_raw)
                    << "\nprometheus log:\n"
                    << Tail(ReadFile(prom.log_path));
  EXPECT_DOUBLE_EQ(jobs, 1) << jobs_raw;
  EXPECT_GE(plan_ok, 1) << requests_raw;
  EXPECT_GE(create_ok, 1) << requests_raw;
  EXPECT_EQ(target_health, "up") << target_error << "\n" << targets_raw;
  EXPECT_EQ(target_url, "http://" + target + "/metrics") << targets_raw;

  // The shipped alert rules were loaded from the config's rule_files.
  absl::StatusOr<Struct> rules = ApiGet(prom.port, "/api/v1/rules?type=alert", &rules_raw);
  ASSERT_TRUE(rules.ok()) << rules.status();
  if (const Value* data = Field(*rules, "data")) {
    if (const Value* groups = Field(data->struct_value(), "groups")) {
      for (const Value& g : groups->list_value().values()) {
        if (const Value* rs = Field(g.struct_value(), "rules")) {
          for (const Value& rule : rs->list_value().values()) {
            alert_names.push_back(StringField(rule.struct_value(), "name"));
          }
        }
      }
    }
  }
  for (const char* want :
       {"PipeplanPlannerDown", "PipeplanPlannerAbsent", "PipeplanSolverGapHigh",
        "PipeplanSolveLatencyP99High", "PipeplanWorkersLost", "PipeplanPredictionErrorHigh"}) {
    EXPECT_NE(std::find(alert_names.begin(), alert_names.end(), want), alert_names.end())
        << want << " not loaded:\n"
        << Tail(rules_raw);
  }

  // Every dashboard query is PromQL this Prometheus evaluates to a vector.
  auto queries = DashboardQueries(deploy + "/../grafana/pipeplan-dashboard.json");
  ASSERT_TRUE(queries.ok()) << queries.status();
  EXPECT_GE(queries->size(), 30u);
  for (const auto& [title, expr] : *queries) {
    std::string raw;
    absl::StatusOr<std::vector<Sample>> r = Query(prom.port, expr, &raw);
    EXPECT_TRUE(r.ok()) << title << ": " << expr << ": " << r.status() << "\n" << Tail(raw);
  }

  // 5. Tear down: both stop on SIGTERM well within the bound.
  EXPECT_EQ(prom.process->Stop(absl::Seconds(10)), 0) << Tail(ReadFile(prom.log_path));
  planner->Signal(SIGTERM);
  EXPECT_EQ(planner->Wait(absl::Seconds(10)), 0) << planner->stderr_text();
  std::cerr << "scraped values visible after " << to_values << " (" << polls + 1
            << " polls); whole test " << absl::Now() - test_start << "\n";
}

}  // namespace
}  // namespace pipeplan::testing
