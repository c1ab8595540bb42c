#include "case_timer.h"

#include <chrono>
#include <numeric>

namespace infini::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `value` over the ranks of the case's group (the world without --split),
// as -a/--average asks.
double AcrossRanks(const RankResources& rank, double value, RankAverage average) {
  switch (average) {
    case RankAverage::kRank0:
      return rank.ReduceOverGroup(rank.case_rank() == 0 ? value : 0, ccl::ReduceOp::kSum);
    case RankAverage::kMin:
      return rank.ReduceOverGroup(value, ccl::ReduceOp::kMin);
    case RankAverage::kMax:
      return rank.ReduceOverGroup(value, ccl::ReduceOp::kMax);
    case RankAverage::kMean:
      break;
  }
  return rank.ReduceOverGroup(value, ccl::ReduceOp::kSum) / rank.case_world_size();
}

std::vector<ccl::Event> MakeEvents(const RankResources& rank, int64_t count) {
  std::vector<ccl::Event> events;
  if (count > kMaxIterationSamples) return events;
  events.reserve(static_cast<size_t>(count));
  for (int64_t index = 0; index < count; ++index) events.emplace_back(rank.communicator.backend());
  return events;
}

// Microseconds between consecutive events (the first from `start`), each
// divided by the launches one span holds.
std::vector<double> Spans(const ccl::Event& start, const std::vector<ccl::Event>& events,
                          double launches_per_span) {
  std::vector<double> spans;
  for (size_t index = 0; index < events.size(); ++index) {
    const ccl::Event& from = index == 0 ? start : events[index - 1];
    spans.push_back(events[index].ElapsedMsSince(from) * 1e3 / launches_per_span);
  }
  return spans;
}

CaseTiming TimeBackToBack(const RankResources& rank, const CollectiveCase& one_case,
                          const BenchOptions& options) {
  const int64_t launches = options.iterations * options.aggregated_launches;
  // A graph replays the --iters iterations; a sample is one replay.
  ccl::Graph graph;
  const bool graphed = options.graph_launches > 0;
  if (graphed) {
    rank.stream.BeginCapture();
    for (int64_t index = 0; index < options.iterations; ++index) {
      LaunchIteration(rank, one_case, options.aggregated_launches);
    }
    graph = rank.stream.EndCapture();
  }
  const int64_t spans = graphed ? options.graph_launches : options.iterations;
  const auto launch_span = [&] {
    if (graphed) {
      graph.Launch(rank.stream);
    } else {
      LaunchIteration(rank, one_case, options.aggregated_launches);
    }
  };

  // The time: the spans back to back between two events, nothing recorded
  // between them, as nccl-tests times (an event a span costs host time that
  // a small eager launch would show).
  rank.communicator.Barrier(rank.stream);
  Clock::time_point host_start;
  if (options.cpu_time) {
    rank.stream.Synchronize();
    host_start = Clock::now();
  }
  rank.start->Record(rank.stream);
  for (int64_t span = 0; span < spans; ++span) launch_span();
  rank.stop->Record(rank.stream);
  rank.stop->Synchronize();
  const double seconds =
      options.cpu_time ? SecondsSince(host_start) : rank.stop->ElapsedMsSince(*rank.start) / 1e3;
  const double total_launches = static_cast<double>(graphed ? spans * launches : launches);
  CaseTiming timing;
  timing.seconds_per_launch = AcrossRanks(rank, seconds / total_launches, options.average);

  // The tail: the same spans again, an event after each (still no barrier
  // between them), the slowest rank's time per span.
  const std::vector<ccl::Event> events = MakeEvents(rank, spans);
  if (!events.empty()) {
    rank.communicator.Barrier(rank.stream);
    rank.start->Record(rank.stream);
    for (int64_t span = 0; span < spans; ++span) {
      launch_span();
      events[static_cast<size_t>(span)].Record(rank.stream);
    }
    events.back().Synchronize();
  }
  const double launches_per_span = static_cast<double>(total_launches) / static_cast<double>(spans);
  timing.iteration_us =
      ReduceListOverRanks(rank, rank.case_communicator(),
                          Spans(*rank.start, events, launches_per_span), ccl::ReduceOp::kMax);
  return timing;
}

CaseTiming TimePerIteration(const RankResources& rank, const CollectiveCase& one_case,
                            const BenchOptions& options) {
  CaseTiming timing;
  const double aggregated = static_cast<double>(options.aggregated_launches);
  double total_seconds = 0;
  for (int64_t iteration = 0; iteration < options.iterations; ++iteration) {
    rank.communicator.Barrier(rank.stream);
    Clock::time_point host_start;
    if (options.cpu_time) {
      rank.stream.Synchronize();
      host_start = Clock::now();
    }
    rank.start->Record(rank.stream);
    LaunchIteration(rank, one_case, options.aggregated_launches);
    rank.stop->Record(rank.stream);
    rank.stop->Synchronize();
    const double seconds =
        options.cpu_time ? SecondsSince(host_start) : rank.stop->ElapsedMsSince(*rank.start) / 1e3;
    // The slowest rank's time is the iteration's.
    const double slowest = rank.ReduceOverGroup(seconds / aggregated, ccl::ReduceOp::kMax);
    total_seconds += slowest;
    if (iteration < kMaxIterationSamples) timing.iteration_us.push_back(slowest * 1e6);
  }
  timing.seconds_per_launch = total_seconds / static_cast<double>(options.iterations);
  return timing;
}

}  // namespace

std::vector<double> ReduceListOverRanks(const RankResources& rank,
                                        const ccl::Communicator& communicator,
                                        std::vector<double> values, ccl::ReduceOp op) {
  if (values.empty()) return values;
  const ccl::DeviceBuffer buffer(communicator.backend(), values.size() * sizeof(double));
  buffer.CopyFromHost(values.data(), values.size() * sizeof(double));
  const ccl::FlatTensor tensor =
      buffer.AsTensor(ccl::dtype::kFloat64, static_cast<int64_t>(values.size()));
  communicator.AllReduce(tensor, tensor, op, rank.stream);
  rank.stream.Synchronize();
  buffer.CopyToHost(values.data(), values.size() * sizeof(double));
  return values;
}

void LaunchIteration(const RankResources& rank, const CollectiveCase& one_case,
                     int64_t aggregated_launches) {
  if (aggregated_launches == 1) return one_case.Launch();
  const ccl::Backend& backend = rank.backend();
  const bool grouped = backend.capabilities().group();
  if (grouped) backend.GroupStart();
  for (int64_t launch = 0; launch < aggregated_launches; ++launch) one_case.Launch();
  if (grouped) backend.GroupEnd();
}

CaseTiming TimeCase(const RankResources& rank, const CollectiveCase& one_case,
                    const BenchOptions& options) {
  return options.timing == Timing::kPerIteration ? TimePerIteration(rank, one_case, options)
                                                 : TimeBackToBack(rank, one_case, options);
}

}  // namespace infini::bench
