// What the planner's search ranges over, as the options leave it open:
// shapes (pipeline ranks, any integer, x data-parallel replicas, using at
// most every device), schedule families, microbatch counts per replica; and
// a lower bound per shape that no placement, split or schedule can beat.
//
// Internal to the planner. Thread safety: plain functions.
#ifndef PIPEPLAN_CORE_SEARCH_SEARCH_SPACE_H_
#define PIPEPLAN_CORE_SEARCH_SEARCH_SPACE_H_

#include <vector>

#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan::search {

struct Shape {
  int ranks = 1;
  int replicas = 1;
};

// Every (ranks, replicas) the options allow: ranks <= the split graph's
// nodes, replicas <= max_replicas, ranks x replicas <= devices, and the
// global batch divisible by the replicas.
std::vector<Shape> ShapesToTry(const Graph& split_graph, const Cluster& cluster,
                               const PlanOptions& options);

// The options' schedule, or every family (the common default first).
std::vector<schedule::ScheduleKind> KindsToTry(const PlanOptions& options);

// Stages per rank of `kind` under the options.
int ChunksPerRank(schedule::ScheduleKind kind, const PlanOptions& options);

// Microbatches per replica, ascending: the options' count, or every divisor
// of the replica's share of the global batch (global_batch / replicas), or 4
// per rank without a global batch (costs are then per microbatch).
std::vector<int> MicrobatchesToTry(const PlanOptions& options, int ranks, int replicas);

// What the lower bounds below need of the graph, cluster and options,
// computed once per search.
struct BoundInputs {
  double work = 0;              // seconds of one graph-batch microbatch, every node, fastest device
  double largest = 0;           // the same of the largest node
  double forward = 0;           // the forward part of `work`
  double backward = 0;          // the backward part of `work`
  double largest_forward = 0;   // the longest forward of one node
  double largest_backward = 0;  // the longest backward of one node
  // The backward's input-gradient part (without the weight gradient), in
  // all and of the node where it is longest.
  double backward_input = 0;
  double largest_backward_input = 0;
  int chunks_per_rank = kDefaultChunksPerRank;  // the options', for StagesPerRank
  // The heaviest nodes (a few): each one's work and the work of it and
  // every node it depends on, which a pipeline runs in its stage or before.
  struct Heavy {
    double work = 0;
    double with_ancestors = 0;
  };
  std::vector<Heavy> heavy;
  // capacity[i]: the summed speed (relative to the fastest) of the i
  // fastest devices.
  std::vector<double> capacity;
  // Graph batches a step trains when a global batch fixes the samples
  // (the unit is then the step), else 1 (the unit is one graph batch).
  double batches = 1;
  bool same_samples = false;
};
BoundInputs MakeBoundInputs(const Graph& graph, const Cluster& cluster, const PlanOptions& options);

// No plan of the shape trains faster per unit (SecondsPerUnit): the work of
// a step spread perfectly over the fastest ranks x replicas devices, and
// the largest node run on every sample of a replica.
double ShapeLowerBound(const BoundInputs& in, const Shape& shape);

// No plan of the shape with `kind` and `microbatches` per replica trains
// faster per unit. Beyond ShapeLowerBound, for the schedules with one stage
// per rank and a whole backward (GPipe, 1F1B), with W, F, B the work,
// forward and backward of one microbatch, t(s), f(s), b(s) those of stage
// s, and T(<s) the work of the stages before s:
//  - the pipeline's fill and drain: rank s starts no earlier than the
//    forwards of stages before it and, after its last backward, the
//    backwards of those stages still run, so the step is at least
//    T(<s) + m t(s) for every stage s, whatever the split; the least such
//    maximum over all splits of the work is W / (1 - (1 - 1/m)^p);
//  - the same for the stage of a heavy node v: T(<s) + t(s) holds v and
//    every node v depends on (a split never sends an edge back), and
//    t(s) >= t(v), so the step is at least A(v) + (m - 1) t(v);
//  - a microbatch's round trip: stage s's first backward waits for the
//    first microbatch to pass every stage after s and back, its m
//    backwards run one after another, and the last one's backward still
//    crosses the stages before s: W + (m - 1) b(s); likewise its last
//    forward: W + (m - 1) f(s). Some stage has b(s) >= B / p, and the
//    stage of the node with the longest backward at least that backward
//    (forwards alike).
// The other schedules but DualPipeV run each stage on one rank one action
// at a time too, so the round trip holds with S = ranks x stages per rank
// stages and the backward's input-gradient part only (zero-bubble
// schedules take the weight gradient off the microbatch's path):
// F + B_in + (m - 1) max(F / S, B_in / S, the longest node forward or
// input-gradient backward). DualPipeV: ShapeLowerBound.
double CandidateLowerBound(const BoundInputs& in, const Shape& shape, schedule::ScheduleKind kind,
                           int microbatches);

}  // namespace pipeplan::search

#endif  // PIPEPLAN_CORE_SEARCH_SEARCH_SPACE_H_
