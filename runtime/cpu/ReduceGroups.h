#pragma once
// How a reduction sees its input, written once for the CPU kernels
// (runtime/cpu/ReductionKernels.cpp) and the CUDA kernels' host-side plan
// (runtime/cuda/ReductionKernels.cu): dims of extent 1 are dropped and
// neighbouring dims with the same role (reduced or kept) merged into groups.
// When the groups are at most [kept, reduced, kept], the input is
// [outer, reduced, inner] ("blocked"); otherwise the backends index it
// through the groups.
#include "runtime/core/Tensor.h"

#include <string>
#include <vector>

namespace megac::cpu {

struct ReduceGroups {
  struct Group {
    int64_t extent;
    bool reduced;
  };
  std::vector<Group> groups;        // in dim order
  int64_t outCount = 1, redCount = 1; // output elements; inputs reduced into each
  bool blocked = true;
  int64_t outer = 1, inner = 1; // when blocked
};

inline ReduceGroups groupReduceDims(const Shape &shape, const std::vector<bool> &reduced) {
  ReduceGroups r;
  for (size_t d = 0; d < shape.size(); ++d) {
    (reduced[d] ? r.redCount : r.outCount) *= shape[d];
    if (shape[d] == 1) continue;
    if (!r.groups.empty() && r.groups.back().reduced == reduced[d]) r.groups.back().extent *= shape[d];
    else r.groups.push_back({shape[d], reduced[d]});
  }
  size_t first = 0;
  if (!r.groups.empty() && !r.groups[0].reduced) r.outer = r.groups[first++].extent;
  if (first < r.groups.size() && r.groups[first].reduced) ++first;
  if (first < r.groups.size() && !r.groups[first].reduced) r.inner = r.groups[first++].extent;
  r.blocked = first == r.groups.size();
  return r;
}

// The dims an ONNX Reduce* op reduces: those `axes` names (negative ones
// count from the end), or every dim when it names none. Returns "" with
// `reduced` set, or what is wrong with an axis (out of range, repeated).
inline std::string reducedDimsFromAxes(int64_t rank, const std::vector<int64_t> &axes, std::vector<bool> &reduced) {
  reduced.assign(size_t(rank), axes.empty());
  for (int64_t ax : axes) {
    if (ax < -rank || ax >= rank)
      return "axis " + std::to_string(ax) + " is out of range for rank " + std::to_string(rank);
    int64_t d = ax < 0 ? ax + rank : ax;
    if (reduced[size_t(d)]) return "axis " + std::to_string(ax) + " is repeated";
    reduced[size_t(d)] = true;
  }
  return "";
}

} // namespace megac::cpu
