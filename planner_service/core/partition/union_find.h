// Disjoint sets over node ids 0..n-1 with path halving: the merge passes that
// contract a graph before partitioning (contraction.cc, zero_cost_merge.cc)
// keep their groups in one. Internal to the partition library.
#ifndef PIPEPLAN_CORE_PARTITION_UNION_FIND_H_
#define PIPEPLAN_CORE_PARTITION_UNION_FIND_H_

#include <numeric>
#include <vector>

namespace pipeplan {

struct UnionFind {
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int Find(int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  // parent[x] == x for a root; callers link roots directly.
  std::vector<int> parent;
};

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PARTITION_UNION_FIND_H_
