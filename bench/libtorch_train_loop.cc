// The baseline of bench/python/train_bench.py: a plain LibTorch training loop with
// nothing of pipeplan in it — the same scripted model the worker runs (the
// one stage of a single-stage compile, `stage_0.pt`), the same data rows,
// microbatches, loss and AdamW settings — so that "1 worker through
// pipeplan / this loop" is the runtime's overhead.
//
//   pipeplan-libtorch-train-loop --stage STAGE_0_PT --data DATA_PT --loss cross_entropy|mse
//       --batch-size B --microbatches M --steps N [--warmup W] [--lr X]
//
// Data: a torch.save'd {"inputs": T, "targets": T}; step s trains rows
// (s*B + i) mod N in M microbatches (docs/model-package.md). Prints one line:
// `steps=N median_step_seconds=X mean_step_seconds=Y samples_per_second=Z
// first_loss=L last_loss=L` (steps after the warm-up only).
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/optim.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string stage, data, loss = "cross_entropy";
  int64_t batch = 8, microbatches = 4, steps = 60, warmup = 5;
  double lr = 1e-3;
};

bool Parse(int argc, char** argv, Args* a) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i + 1 < argc; i += 2) kv[argv[i]] = argv[i + 1];
  if (!kv.count("--stage") || !kv.count("--data")) return false;
  a->stage = kv["--stage"];
  a->data = kv["--data"];
  if (kv.count("--loss")) a->loss = kv["--loss"];
  if (kv.count("--batch-size")) a->batch = std::atoll(kv["--batch-size"].c_str());
  if (kv.count("--microbatches")) a->microbatches = std::atoll(kv["--microbatches"].c_str());
  if (kv.count("--steps")) a->steps = std::atoll(kv["--steps"].c_str());
  if (kv.count("--warmup")) a->warmup = std::atoll(kv["--warmup"].c_str());
  if (kv.count("--lr")) a->lr = std::atof(kv["--lr"].c_str());
  return a->batch % a->microbatches == 0 && a->steps > 0;
}

torch::Tensor Loss(const std::string& loss, const torch::Tensor& y, const torch::Tensor& t) {
  if (loss == "cross_entropy") {
    return torch::cross_entropy_loss(y.reshape({-1, y.size(-1)}), t.reshape({-1}).to(torch::kLong));
  }
  return torch::mse_loss(y, t.to(y.scalar_type()));
}

// A tied parameter (gpt's wte / lm_head) is one tensor under two names: the
// optimizer gets it once.
std::vector<torch::Tensor> UniqueParameters(const torch::jit::Module& module) {
  std::vector<torch::Tensor> params;
  for (const auto& p : module.parameters()) {
    if (std::none_of(params.begin(), params.end(),
                     [&](const torch::Tensor& q) { return q.is_same(p); })) {
      params.push_back(p);
    }
  }
  return params;
}

void PrintSummary(const std::vector<double>& seconds, int64_t batch, double first_loss,
                  double last_loss) {
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double s : seconds) mean += s / static_cast<double>(seconds.size());
  const double median = sorted[sorted.size() / 2];
  std::printf(
      "steps=%zu median_step_seconds=%.6f mean_step_seconds=%.6f samples_per_second=%.2f "
      "first_loss=%.9g last_loss=%.9g\n",
      seconds.size(), median, mean, static_cast<double>(batch) / median, first_loss, last_loss);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: %s --stage STAGE_0_PT --data DATA_PT [--loss L] [--batch-size B]\n"
                 "  [--microbatches M] [--steps N] [--warmup W] [--lr X]\n",
                 argv[0]);
    return 2;
  }
  torch::jit::Module module = torch::jit::load(a.stage);
  module.train(true);
  torch::optim::AdamW optimizer(UniqueParameters(module),
                                torch::optim::AdamWOptions(a.lr).weight_decay(0.01));

  std::ifstream in(a.data, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto dict = torch::jit::pickle_load(bytes).toGenericDict();
  const torch::Tensor inputs = dict.at("inputs").toTensor();
  const torch::Tensor targets = dict.at("targets").toTensor();
  const int64_t rows = inputs.size(0), mb = a.batch / a.microbatches;

  std::vector<double> seconds;
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < a.warmup + a.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const torch::Tensor index = (torch::arange(a.batch) + step * a.batch).remainder(rows);
    const torch::Tensor x = inputs.index_select(0, index), t = targets.index_select(0, index);
    double loss_sum = 0;
    for (int64_t m = 0; m < a.microbatches; ++m) {
      const torch::Tensor y =
          module.forward({x.narrow(0, m * mb, mb)}).toTupleRef().elements()[0].toTensor();
      torch::Tensor loss = Loss(a.loss, y, t.narrow(0, m * mb, mb)) / a.microbatches;
      loss.backward();
      loss_sum += loss.item<double>();
    }
    optimizer.step();
    optimizer.zero_grad();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step >= a.warmup) seconds.push_back(s);
    if (step == 0) first_loss = loss_sum;
    last_loss = loss_sum;
  }
  PrintSummary(seconds, a.batch, first_loss, last_loss);
  return 0;
}
