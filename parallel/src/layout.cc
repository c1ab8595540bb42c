#include "infini/parallel/layout.h"

#include <stdexcept>

#include "infini/parallel/errors.h"

namespace infini::parallel {

std::string_view AxisName(Axis axis) {
  switch (axis) {
    case Axis::kTensor:
      return "tp";
    case Axis::kData:
      return "dp";
    case Axis::kPipeline:
      return "pp";
  }
  return "?";
}

Layout::Layout(int data_parallel_size, int tensor_parallel_size, int pipeline_parallel_size)
    : data_(data_parallel_size), tensor_(tensor_parallel_size), pipeline_(pipeline_parallel_size) {
  if (data_ < 1 || tensor_ < 1 || pipeline_ < 1) {
    throw ParallelConfigError(
        "layout DP=" + std::to_string(data_) + " × TP=" + std::to_string(tensor_) +
        " × PP=" + std::to_string(pipeline_) + ": expected every size to be positive");
  }
}

Layout Layout::ForWorld(int world_size, int tensor_parallel_size, int pipeline_parallel_size) {
  if (tensor_parallel_size < 1 || pipeline_parallel_size < 1) {
    throw ParallelConfigError("--tensor_parallel=" + std::to_string(tensor_parallel_size) +
                              " --pipeline_parallel=" + std::to_string(pipeline_parallel_size) +
                              ": expected positive sizes");
  }
  const int model_parallel = tensor_parallel_size * pipeline_parallel_size;
  if (world_size % model_parallel != 0) {
    throw ParallelConfigError("--tensor_parallel=" + std::to_string(tensor_parallel_size) +
                              " × --pipeline_parallel=" + std::to_string(pipeline_parallel_size) +
                              " = " + std::to_string(model_parallel) +
                              " does not divide the world size " + std::to_string(world_size) +
                              ": expected a divisor, so that DP = world / (TP × PP)");
  }
  return Layout(world_size / model_parallel, tensor_parallel_size, pipeline_parallel_size);
}

Layout Layout::ForSurvivors(int world_size) const {
  const int model_parallel = tensor_ * pipeline_;
  if (world_size < model_parallel || world_size % model_parallel != 0) {
    throw ParallelConfigError(
        "layout DP=" + std::to_string(data_) + " × TP=" + std::to_string(tensor_) +
        " × PP=" + std::to_string(pipeline_) + " cannot be kept by the " +
        std::to_string(world_size) + " surviving rank" + (world_size == 1 ? "" : "s") +
        ": expected a multiple of TP × PP = " + std::to_string(model_parallel) +
        " (a lost rank leaves DP = survivors / (TP × PP))");
  }
  return Layout(world_size / model_parallel, tensor_, pipeline_);
}

int Layout::AxisSize(Axis axis) const {
  switch (axis) {
    case Axis::kTensor:
      return tensor_;
    case Axis::kData:
      return data_;
    case Axis::kPipeline:
      return pipeline_;
  }
  return 1;
}

Coordinates Layout::CoordinatesOf(int global_rank) const {
  if (global_rank < 0 || global_rank >= world_size()) {
    throw std::out_of_range("rank " + std::to_string(global_rank) + " is outside the layout's " +
                            std::to_string(world_size()) + " ranks");
  }
  Coordinates coordinates;
  coordinates.tensor = global_rank % tensor_;
  coordinates.data = (global_rank / tensor_) % data_;
  coordinates.pipeline = global_rank / (tensor_ * data_);
  return coordinates;
}

int Layout::RankAt(const Coordinates& c) const {
  if (c.tensor < 0 || c.tensor >= tensor_ || c.data < 0 || c.data >= data_ || c.pipeline < 0 ||
      c.pipeline >= pipeline_) {
    throw std::out_of_range("coordinates (tp=" + std::to_string(c.tensor) +
                            ", dp=" + std::to_string(c.data) +
                            ", pp=" + std::to_string(c.pipeline) + ") are outside the layout");
  }
  return c.tensor + tensor_ * (c.data + data_ * c.pipeline);
}

// A group's id numbers the two other coordinates, faster one first.
int Layout::GroupIdOf(Axis axis, int global_rank) const {
  const Coordinates c = CoordinatesOf(global_rank);
  switch (axis) {
    case Axis::kTensor:
      return c.data + data_ * c.pipeline;
    case Axis::kData:
      return c.tensor + tensor_ * c.pipeline;
    case Axis::kPipeline:
      return c.tensor + tensor_ * c.data;
  }
  return 0;
}

std::vector<int> Layout::GroupMembers(Axis axis, int group_id) const {
  if (group_id < 0 || group_id >= GroupCount(axis)) {
    throw std::out_of_range(std::string(AxisName(axis)) + " group id " + std::to_string(group_id) +
                            " is outside 0.." + std::to_string(GroupCount(axis) - 1));
  }
  Coordinates base;
  switch (axis) {
    case Axis::kTensor:
      base.data = group_id % data_;
      base.pipeline = group_id / data_;
      break;
    case Axis::kData:
      base.tensor = group_id % tensor_;
      base.pipeline = group_id / tensor_;
      break;
    case Axis::kPipeline:
      base.tensor = group_id % tensor_;
      base.data = group_id / tensor_;
      break;
  }
  std::vector<int> members;
  for (int position = 0; position < AxisSize(axis); ++position) {
    Coordinates c = base;
    if (axis == Axis::kTensor) c.tensor = position;
    if (axis == Axis::kData) c.data = position;
    if (axis == Axis::kPipeline) c.pipeline = position;
    members.push_back(RankAt(c));
  }
  return members;
}

std::string Layout::GroupName(Axis axis, int group_id) {
  return std::string(AxisName(axis)) + std::to_string(group_id);
}

std::string Layout::Overview() const {
  std::string text = "layout DP=" + std::to_string(data_) + " × TP=" + std::to_string(tensor_) +
                     " × PP=" + std::to_string(pipeline_) + " (order TP-DP-PP, " +
                     std::to_string(world_size()) + " ranks)\n";
  for (Axis axis : {Axis::kTensor, Axis::kData, Axis::kPipeline}) {
    for (int id = 0; id < GroupCount(axis); ++id) {
      text += GroupName(axis, id) + ": [";
      const std::vector<int> members = GroupMembers(axis, id);
      for (size_t i = 0; i < members.size(); ++i) {
        text += (i == 0 ? "" : ", ") + std::to_string(members[i]);
      }
      text += "]\n";
    }
  }
  return text;
}

}  // namespace infini::parallel
