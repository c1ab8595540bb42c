// A DP × TP × PP layout of the world in Megatron's default order, TP-DP-PP:
// tensor-parallel coordinate varies fastest, then data-parallel, then
// pipeline, so the ranks of a TP group are neighbours (one node, fast links).
//
//   global_rank = tp + TP × (dp + DP × pp)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace infini::parallel {

enum class Axis { kTensor, kData, kPipeline };
std::string_view AxisName(Axis axis);  // "tp", "dp", "pp"

struct Coordinates {
  int tensor = 0;
  int data = 0;
  int pipeline = 0;
  friend bool operator==(const Coordinates&, const Coordinates&) = default;
};

class Layout {
 public:
  // Throws ParallelConfigError when a size is not positive.
  Layout(int data_parallel_size, int tensor_parallel_size, int pipeline_parallel_size);
  // DP is what is left of `world_size`; throws ParallelConfigError (naming
  // the flags --tensor_parallel and --pipeline_parallel) when TP × PP does not
  // divide it.
  static Layout ForWorld(int world_size, int tensor_parallel_size, int pipeline_parallel_size);
  // This layout re-derived for a world that lost ranks
  // (Context::RecoverFromLoss): TP and PP stay, DP is what is left. Throws
  // ParallelConfigError naming this layout when TP × PP does not divide
  // `world_size`.
  Layout ForSurvivors(int world_size) const;

  int data_parallel_size() const { return data_; }
  int tensor_parallel_size() const { return tensor_; }
  int pipeline_parallel_size() const { return pipeline_; }
  int world_size() const { return data_ * tensor_ * pipeline_; }
  int AxisSize(Axis axis) const;

  // Throws std::out_of_range for a rank or coordinate outside the layout.
  Coordinates CoordinatesOf(int global_rank) const;
  int RankAt(const Coordinates& coordinates) const;

  // Groups along an axis: the ranks that differ only in that coordinate.
  // Ids run 0..GroupCount(axis)-1; members are in increasing order, which is
  // also their order (group rank) along the axis.
  int GroupCount(Axis axis) const { return world_size() / AxisSize(axis); }
  int GroupIdOf(Axis axis, int global_rank) const;
  std::vector<int> GroupMembers(Axis axis, int group_id) const;
  // "tp3": the name process groups of this layout are created under.
  static std::string GroupName(Axis axis, int group_id);

  // Every group of every axis, one per line:
  //   layout DP=2 × TP=2 × PP=2 (order TP-DP-PP, 8 ranks)
  //   tp0: [0, 1]
  //   ...
  std::string Overview() const;

 private:
  int data_;
  int tensor_;
  int pipeline_;
};

}  // namespace infini::parallel
