#include "pipeplan/worker/report/cpu_use.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pipeplan::worker {

std::string CpuListString(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

std::optional<v1::CpuUse> CurrentCpuUse(int threads) {
  if (threads <= 0) return std::nullopt;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::nullopt;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty()) return std::nullopt;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  v1::CpuUse out;
  out.set_pool(absl::StrCat(host, ":", CpuListString(cpus)));
  out.set_cpus(static_cast<int>(cpus.size()));
  out.set_threads(threads);
  return out;
}

}  // namespace pipeplan::worker
