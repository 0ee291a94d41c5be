// The PlanRequests tests send, built in one place: the bundled small chain,
// a long uneven chain for slow solves and big messages, and a uniform chain
// whose best split is known (every stage gets the same number of nodes).
#ifndef PIPEPLAN_TESTS_SUPPORT_PLAN_REQUESTS_H_
#define PIPEPLAN_TESTS_SUPPORT_PLAN_REQUESTS_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "pipeplan/v1/plan.pb.h"
#include "support/test_data.h"

namespace pipeplan::testing {

// chain_small on 8xA100 with stages 4, 1F1B, 8 microbatches, method dp.
inline v1::PlanRequest SmallRequest() {
  v1::PlanRequest r;
  *r.mutable_graph() = ReadJson<v1::ModelGraph>("chain_small.json");
  *r.mutable_cluster() = ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  r.mutable_options()->set_num_ranks(4);
  r.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  r.mutable_options()->set_microbatches(8);
  r.mutable_options()->set_method(v1::METHOD_DP);
  return r;
}

// A chain of `n` linear nodes of uneven cost on 8xA100, options left to the
// planner (time limit 60 s): slow solves and big messages.
inline v1::PlanRequest ChainRequest(int n) {
  v1::PlanRequest r;
  r.mutable_graph()->set_name("chain" + std::to_string(n));
  for (int i = 0; i < n; ++i) {
    v1::Node* node = r.mutable_graph()->add_nodes();
    node->set_id("n" + std::to_string(i));
    node->set_op("linear");
    // 64-bit: the product passes INT_MAX from about 271k nodes on.
    node->set_forward_flops(1e9 + (int64_t{i} * 7919 % 1000) * 1e6);
    node->set_param_bytes(1e3);
    node->set_output_bytes(1e6);
    if (i > 0) {
      v1::Edge* e = r.mutable_graph()->add_edges();
      e->set_src("n" + std::to_string(i - 1));
      e->set_dst("n" + std::to_string(i));
    }
  }
  *r.mutable_cluster() = ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  r.mutable_options()->set_time_limit_seconds(60);
  return r;
}

struct UniformChain {
  double forward_flops = 1e12;  // per node
  double param_bytes = 1e6;     // per node
  double output_bytes = 1e3;    // per node
  double memory_bytes = 80e9;   // per device
};

// "chain16": 16 equal nodes n0..n15 on 4 equal devices gpu0..gpu3 (one host,
// 100 TFLOP/s each); 4 stages, 1F1B, 4 microbatches, method dp, SGD in fp32
// (a stage holds its parameters and their gradients: the memory arithmetic
// of the tests that use it). With room in memory every stage gets 4 nodes.
inline v1::PlanRequest UniformChainRequest(const UniformChain& chain = {}) {
  v1::PlanRequest r;
  r.mutable_graph()->set_name("chain16");
  for (int i = 0; i < 16; ++i) {
    v1::Node* n = r.mutable_graph()->add_nodes();
    n->set_id(absl::StrCat("n", i));
    n->set_forward_flops(chain.forward_flops);
    n->set_param_bytes(chain.param_bytes);
    n->set_output_bytes(chain.output_bytes);
    if (i > 0) {
      v1::Edge* e = r.mutable_graph()->add_edges();
      e->set_src(absl::StrCat("n", i - 1));
      e->set_dst(n->id());
    }
  }
  for (int d = 0; d < 4; ++d) {
    v1::Device* dev = r.mutable_cluster()->add_devices();
    dev->set_id(absl::StrCat("gpu", d));
    dev->set_host("h0");
    dev->set_flops(100e12);
    dev->set_memory_bytes(chain.memory_bytes);
  }
  r.mutable_options()->set_num_ranks(4);
  r.mutable_options()->set_microbatches(4);
  r.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  r.mutable_options()->set_method(v1::METHOD_DP);
  r.mutable_options()->set_optimizer(v1::OPTIMIZER_SGD);
  r.mutable_options()->set_precision(v1::PRECISION_FP32);
  return r;
}

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_SUPPORT_PLAN_REQUESTS_H_
