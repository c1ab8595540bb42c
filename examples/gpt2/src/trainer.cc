#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <ostream>
#include <thread>
#include <utility>

#include "adamw.h"
#include "checkpoint.h"
#include "device_training.h"
#include "infini/common/one_line.h"
#include "infini/data/error.h"
#include "infini/data/loader.h"
#include "infini/data/token_file.h"

namespace infini::examples::gpt2 {
namespace {

using Clock = std::chrono::steady_clock;

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char line[512];
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(line, sizeof(line), format, arguments);
  va_end(arguments);
  return line;
}

template <typename T>
std::span<std::byte> AsBytes(std::span<T> values) {
  return std::as_writable_bytes(values);
}

// Rank 0 looks for a checkpoint and tells everyone what it found; the others
// take the weights and optimizer state from it, so only rank 0 needs the file.
TrainingProgress ResumeFromMain(const std::string& directory, Model& model, AdamW& optimizer,
                                DataParallelGroup& group, std::string* loaded_path) {
  enum Status : int64_t { kNone = 0, kLoaded = 1, kFailed = 2 };
  struct Found {
    int64_t status, steps_done, consumed_samples, optimizer_steps;
  } found{kNone, 0, 0, 0};
  std::string failure;
  if (group.is_main()) {
    *loaded_path = LatestCheckpoint(directory);
    if (!loaded_path->empty()) {
      try {
        const TrainingProgress progress = LoadCheckpoint(*loaded_path, model, optimizer);
        found = {kLoaded, progress.steps_done, progress.consumed_samples, optimizer.steps_taken()};
      } catch (const CheckpointError& error) {
        found.status = kFailed;
        failure = error.what();
      }
    }
  }
  group.BroadcastFromMain(AsBytes(std::span<Found>(&found, 1)));
  if (found.status == kFailed) {
    throw std::runtime_error(group.is_main() ? failure
                                             : "rank 0 could not load the checkpoint in "
                                               "--checkpoint_dir (see rank 0's message)");
  }
  if (found.status == kNone) return {};
  group.BroadcastFromMain(AsBytes(model.parameters()));
  group.BroadcastFromMain(AsBytes(optimizer.first_moment()));
  group.BroadcastFromMain(AsBytes(optimizer.second_moment()));
  optimizer.set_steps_taken(found.optimizer_steps);
  return {found.steps_done, found.consumed_samples};
}

// Mean loss over the same held-out micro-batches at every evaluation; each
// rank reads its own slice, and the ranks average.
class Validator {
 public:
  Validator(const TrainOptions& options, const DataParallelGroup& group) {
    if (options.val_data.empty() || options.val_batches == 0) return;
    auto source = std::make_shared<data::TokenDataset>(options.val_data, options.sequence_length);
    // Small held-out sets get smaller micro-batches rather than none.
    const int64_t micro_batch_size =
        std::min(options.micro_batch_size, source->num_samples() / group.world_size());
    if (micro_batch_size == 0) {
      skipped_reason_ = Format(
          "validation skipped: %s has %lld samples of %lld tokens, fewer "
          "than the %d ranks",
          options.val_data.c_str(), static_cast<long long>(source->num_samples()),
          static_cast<long long>(options.sequence_length), group.world_size());
      return;
    }
    loader_options_.micro_batch_size = micro_batch_size;
    loader_options_.data_parallel_size = group.world_size();
    loader_options_.data_parallel_rank = group.rank();
    source_ = source;
    data::DataLoader probe(source_, loader_options_);
    batches_ = std::min(options.val_batches, probe.steps_per_epoch());
    inputs_.resize(probe.tokens_per_micro_batch());
    targets_.resize(probe.tokens_per_micro_batch());
  }

  bool enabled() const { return source_ != nullptr; }
  const std::string& skipped_reason() const { return skipped_reason_; }

  // `forward` returns the mean loss of (inputs, targets, batch, sequence).
  using Forward =
      std::function<float(std::span<const int32_t>, std::span<const int32_t>, int64_t, int64_t)>;
  float Evaluate(const Forward& forward, DataParallelGroup& group) {
    data::DataLoader loader(source_, loader_options_);
    float loss_sum = 0.0f;
    for (int64_t batch = 0; batch < batches_; ++batch) {
      loader.Next(std::span<int32_t>(inputs_), std::span<int32_t>(targets_));
      loss_sum +=
          forward(inputs_, targets_, loader_options_.micro_batch_size, source_->sequence_length());
    }
    float mean = loss_sum / static_cast<float>(batches_);
    group.AllReduceAverage(std::span<float>(&mean, 1));
    return mean;
  }

 private:
  std::shared_ptr<const data::SampleSource> source_;
  data::LoaderOptions loader_options_;
  int64_t batches_ = 0;
  std::vector<int32_t> inputs_, targets_;
  std::string skipped_reason_;
};

// Rejects bfloat16 on the host.
void CheckOptionsForPlace(const TrainOptions& options, bool on_device) {
  if (on_device) return;
  if (options.dtype == TrainDtype::kBFloat16) {
    throw UsageError(
        "--dtype=bfloat16: expected a GPU backend (--ccl_backend=nccl); the host path computes "
        "in float32");
  }
}

// Tokens per second over the steps after the first `skip` (they pay for
// warm-up), or over all of them when there are no others.
struct Throughput {
  double tokens_per_s = 0.0;
  double step_ms = 0.0;
  int64_t steps = 0;
};
Throughput MeasureThroughput(const std::vector<double>& step_seconds, int64_t skip,
                             double tokens_per_step) {
  const size_t first =
      step_seconds.size() > static_cast<size_t>(skip) ? static_cast<size_t>(skip) : 0;
  const double seconds = std::accumulate(step_seconds.begin() + static_cast<std::ptrdiff_t>(first),
                                         step_seconds.end(), 0.0);
  Throughput result;
  result.steps = static_cast<int64_t>(step_seconds.size() - first);
  if (result.steps == 0 || seconds <= 0.0) return result;
  result.step_ms = seconds * 1e3 / static_cast<double>(result.steps);
  result.tokens_per_s = tokens_per_step * static_cast<double>(result.steps) / seconds;
  return result;
}

// What a run does: one rank communicates nothing, and the host path always
// all-reduces after backward.
GradientSync EffectiveGradientSync(const TrainOptions& options, const DataParallelGroup& group,
                                   bool on_device) {
  if (group.world_size() == 1 || options.gradient_sync == GradientSync::kNone) {
    return GradientSync::kNone;
  }
  return on_device ? options.gradient_sync : GradientSync::kAfterBackward;
}

const char* GradientSyncName(GradientSync sync) {
  switch (sync) {
    case GradientSync::kOverlap:
      return "overlap";
    case GradientSync::kAfterBackward:
      return "after_backward";
    case GradientSync::kNone:
      return "none";
  }
  return "?";
}

// Tests of in-place recovery only: INFINI_TEST_GPT2_KILL="RANK@STEP,..."
// makes the process launched as RANK (its RANK variable) SIGKILL itself as
// step STEP (1-based) begins, as a crashed node would.
void KillSelfIfAskedForTests(int64_t step_number) {
  const char* plan = std::getenv("INFINI_TEST_GPT2_KILL");
  const char* rank = std::getenv("RANK");
  if (plan == nullptr || rank == nullptr) return;
  const std::string here = std::string(rank) + "@" + std::to_string(step_number);
  const std::string entries = "," + std::string(plan) + ",";
  if (entries.find("," + here + ",") != std::string::npos) std::raise(SIGKILL);
}

// Tests of in-place recovery only: INFINI_TEST_GPT2_STEP_DELAY_MS=N makes
// every step begin N ms late, so that a test can act while the run goes on.
void DelayStepIfAskedForTests() {
  const char* delay = std::getenv("INFINI_TEST_GPT2_STEP_DELAY_MS");
  if (delay == nullptr) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
}

// The same global batch of `global_samples` split over `data_parallel_size`
// ranks: the accumulation kept where it fits, else the smallest that does.
// Throws std::runtime_error when no split gives every rank the same share.
std::pair<int64_t, int64_t> SplitGlobalBatch(int64_t global_samples, int64_t data_parallel_size,
                                             int64_t accumulation) {
  for (int64_t steps = accumulation; steps <= global_samples; ++steps) {
    if (global_samples % (data_parallel_size * steps) == 0) {
      return {global_samples / (data_parallel_size * steps), steps};
    }
  }
  throw std::runtime_error(
      Format("the global batch of %lld samples cannot be split evenly over the %lld ranks "
             "(expected a global batch that is a multiple of the data-parallel size)",
             static_cast<long long>(global_samples), static_cast<long long>(data_parallel_size)));
}

std::string RankList(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

}  // namespace

TrainingSummary Train(const TrainOptions& options, DataParallelGroup& group, std::ostream& log) {
  const auto say = [&](const std::string& line) {
    if (group.is_main()) log << line << "\n" << std::flush;
  };
  const Clock::time_point start = Clock::now();
  const int64_t T = options.sequence_length;
  // Both change when a recovery splits the same global batch over fewer ranks.
  int64_t B = options.micro_batch_size;
  // A rank that joined a running run takes the run's split from rank 0.
  const bool joiner = group.joined_running_run();
  int64_t accumulation = joiner ? 1 : AccumulationSteps(options, group.world_size());
  const bool on_device = group.on_cuda_device();
  CheckOptionsForPlace(options, on_device);
  if (T > options.model.max_sequence_length) {
    throw UsageError("--sequence_length=" + std::to_string(T) + ": expected at most the model's " +
                     std::to_string(options.model.max_sequence_length));
  }

  std::shared_ptr<const data::SampleSource> train_source;
  std::unique_ptr<data::DataLoader> loader;
  data::LoaderOptions loader_options;
  loader_options.micro_batch_size = B;
  loader_options.data_parallel_size = group.world_size();
  loader_options.data_parallel_rank = group.rank();
  loader_options.gradient_accumulation_steps = accumulation;
  loader_options.shuffle = options.shuffle;
  loader_options.seed = options.seed;
  std::shared_ptr<data::TokenDataset> dataset;
  try {
    dataset = std::make_shared<data::TokenDataset>(options.train_data, T);
    train_source = dataset;
    loader = std::make_unique<data::DataLoader>(train_source, loader_options);
  } catch (const data::InvalidArgumentError& error) {
    // The file is fine but too small for this batch shape: say which file.
    throw std::runtime_error("--train_data='" + OneLine(options.train_data) + "': " + error.what());
  }

  // Identical weights everywhere: the same seed, and rank 0's copy wins.
  Model model(options.model);
  model.InitializeWeights(options.seed);
  if (!joiner) group.BroadcastFromMain(AsBytes(model.parameters()));  // joiners: below
  AdamWOptions adamw;
  adamw.learning_rate = options.learning_rate;
  adamw.weight_decay = options.weight_decay;
  AdamW optimizer(model.tensors(), model.num_parameters(), adamw);
  std::unique_ptr<DeviceTraining> device;
  DeviceTrainingOptions device_options;
  if (on_device) {
    device_options.model = options.model;
    device_options.dtype = options.dtype;
    device_options.max_batch_size = B;
    device_options.gradient_sync = options.gradient_sync;
    device_options.bucket_bytes = static_cast<size_t>(options.bucket_size_mb) << 20;
    device_options.register_buckets = options.register_buckets;
    device_options.adamw = adamw;
    device_options.grad_clip = options.grad_clip;
    device = CreateDeviceTraining(device_options, model, group);
  }

  say(Format("gpt2: %d rank%s, backend %s", group.world_size(), group.world_size() > 1 ? "s" : "",
             group.description().c_str()));
  say(device
          ? "compute: " + device->description()
          : Format("compute: host, float32, gradients %s",
                   group.world_size() == 1                        ? "local"
                   : options.gradient_sync == GradientSync::kNone ? "not communicated"
                                                                  : "all-reduced after backward"));
  say(
      Format("model: %lld layers, %lld heads, %lld channels, sequence %lld, vocab %lld, "
             "%.3fM parameters",
             static_cast<long long>(options.model.num_layers),
             static_cast<long long>(options.model.num_heads),
             static_cast<long long>(options.model.channels), static_cast<long long>(T),
             static_cast<long long>(options.model.vocab_size),
             static_cast<double>(model.num_parameters()) / 1e6));
  say(
      Format("data: %s: %lld tokens, %lld samples; global batch %lld = %lld per rank x %d "
             "ranks x %lld accumulation; %lld steps per epoch",
             options.train_data.c_str(), static_cast<long long>(dataset->file().num_tokens()),
             static_cast<long long>(dataset->num_samples()),
             static_cast<long long>(loader->global_batch_size()), static_cast<long long>(B),
             group.world_size(), static_cast<long long>(accumulation),
             static_cast<long long>(loader->steps_per_epoch())));

  TrainingProgress progress;
  if (options.resume && !joiner) {
    std::string path;
    progress = ResumeFromMain(options.checkpoint_dir, model, optimizer, group, &path);
    say(path.empty() ? "resume: no checkpoint in " + options.checkpoint_dir + ", starting fresh"
                     : Format("resume: %s (step %lld, %lld samples consumed)", path.c_str(),
                              static_cast<long long>(progress.steps_done),
                              static_cast<long long>(progress.consumed_samples)));
    loader->load_state({progress.consumed_samples});
    if (device && progress.steps_done > 0) device->LoadState(model, optimizer);
  }

  Validator validator(options, group);
  if (!validator.skipped_reason().empty()) say(validator.skipped_reason());

  TrainingSummary summary;
  summary.first_step = progress.steps_done;
  std::vector<int32_t> inputs(loader->tokens_per_micro_batch());
  std::vector<int32_t> targets(loader->tokens_per_micro_batch());
  const double tokens_per_step = static_cast<double>(loader->global_batch_size() * T);

  const auto save = [&](int64_t steps_done) {
    if (options.checkpoint_dir.empty()) return;
    if (group.is_main()) {
      if (device) {
        // The device holds the state; AdamW's bias correction counts the
        // steps taken, which on the device are the steps done.
        device->StoreState(model, optimizer);
        optimizer.set_steps_taken(steps_done);
      }
      SaveCheckpoint(options.checkpoint_dir, model, optimizer,
                     {steps_done, loader->state().consumed_samples});
    }
    say("checkpoint: " + CheckpointPath(options.checkpoint_dir, steps_done));
  };
  const Validator::Forward forward = [&](std::span<const int32_t> tokens,
                                         std::span<const int32_t> next_tokens, int64_t rows,
                                         int64_t length) {
    return device ? device->Evaluate(tokens, next_tokens, rows, length)
                  : model.Forward(tokens, next_tokens, rows, length);
  };
  const auto validate = [&](int64_t steps_done) {
    if (!validator.enabled()) return;
    summary.validation_loss = validator.Evaluate(forward, group);
    say(Format("val loss %.4f (after step %lld)", summary.validation_loss,
               static_cast<long long>(steps_done)));
  };

  float micro_weight = 1.0f / static_cast<float>(accumulation);
  // One optimizer step on the host: every rank ends with the same averaged
  // gradient, so the same update. Returns the loss and the gradient norm.
  const auto host_step = [&]() -> std::pair<float, float> {
    model.ZeroGradients();
    float loss = 0.0f;
    for (int64_t micro_step = 0; micro_step < accumulation; ++micro_step) {
      loader->Next(std::span<int32_t>(inputs), std::span<int32_t>(targets));
      loss += model.Forward(inputs, targets, B, T) * micro_weight;
      model.Backward(micro_weight);
    }
    if (options.gradient_sync != GradientSync::kNone) group.AllReduceAverage(model.gradients());
    const float norm = ClipGradientNorm(model.gradients(), options.grad_clip);
    optimizer.Step(model.parameters(), model.gradients());
    return {loss, norm};
  };
  const auto device_step = [&](int64_t step_number) -> std::pair<float, float> {
    for (int64_t micro_step = 0; micro_step < accumulation; ++micro_step) {
      loader->Next(std::span<int32_t>(inputs), std::span<int32_t>(targets));
      device->MicroStep(inputs, targets, B, T, micro_weight, micro_step + 1 == accumulation);
    }
    device->OptimizerStep(step_number);
    const float loss = device->ReadLoss();
    return {loss, device->ReadGradientNorm()};
  };

  // --on_failure=shrink: after a loss the survivors go on from the step it
  // interrupted, and after an admission the joiners start at the survivors'
  // step, all with rank 0's data position and the same global batch over the
  // new DP size. Replicas stay equal as long as they applied the same steps
  // (each applies the same all-reduced gradients), so rank 0's weights and
  // optimizer state travel only to joiners (`fresh_ranks`) or when the lost
  // step was applied on some survivors and not others: that broadcast of
  // the whole model and both moments would be most of a recovery's time.
  // Returns the steps done.
  int64_t global_batch = loader->global_batch_size();
  const auto take_state_from_main = [&](int64_t steps_completed, bool fresh_ranks) {
    struct Agreed {
      int64_t steps_completed, optimizer_steps, consumed_samples, global_batch, accumulation;
    } agreed{steps_completed, optimizer.steps_taken(),
             progress.consumed_samples + (steps_completed - progress.steps_done) * global_batch,
             global_batch, accumulation};
    group.BroadcastFromMain(AsBytes(std::span<Agreed>(&agreed, 1)));
    float differs = fresh_ranks || steps_completed != agreed.steps_completed ? 1.0f : 0.0f;
    group.AllReduceAverage(std::span<float>(&differs, 1));
    const bool replicas_agree = differs == 0.0f;
    if (!replicas_agree) {
      // On the device path the device holds rank 0's state: to the host first.
      if (device && group.is_main()) device->StoreState(model, optimizer);
      group.BroadcastFromMain(AsBytes(model.parameters()));
      group.BroadcastFromMain(AsBytes(optimizer.first_moment()));
      group.BroadcastFromMain(AsBytes(optimizer.second_moment()));
    }
    optimizer.set_steps_taken(agreed.optimizer_steps);
    global_batch = agreed.global_batch;
    std::tie(B, accumulation) =
        SplitGlobalBatch(global_batch, group.world_size(), agreed.accumulation);
    micro_weight = 1.0f / static_cast<float>(accumulation);
    loader_options.micro_batch_size = B;
    loader_options.data_parallel_size = group.world_size();
    loader_options.data_parallel_rank = group.rank();
    loader_options.gradient_accumulation_steps = accumulation;
    loader = std::make_unique<data::DataLoader>(train_source, loader_options,
                                                data::LoaderState{agreed.consumed_samples});
    inputs.resize(loader->tokens_per_micro_batch());
    targets.resize(loader->tokens_per_micro_batch());
    validator = Validator(options, group);
    progress = {agreed.steps_completed, agreed.consumed_samples};
    // Buckets, registrations and the gradient scale belong to the old world:
    // remade around the device's state when it is everyone's and the
    // micro-batch still fits; otherwise the device training is made again
    // from the host's copy (rank 0's, or this rank's own).
    if (device && !(replicas_agree && device->Regroup(B))) {
      if (replicas_agree) device->StoreState(model, optimizer);
      device.reset();
      device_options.max_batch_size = B;
      device = CreateDeviceTraining(device_options, model, group);
      device->LoadState(model, optimizer);
    }
    return agreed.steps_completed;
  };
  const auto recover = [&](int64_t interrupted_step, int64_t steps_completed) {
    std::vector<int> lost;
    for (;;) {
      try {
        const RecoveredGroup world = group.RecoverFromLoss();
        lost.insert(lost.end(), world.newly_lost_ranks.begin(), world.newly_lost_ranks.end());
        const int64_t resumed = take_state_from_main(steps_completed, false);
        say(Format(
            "lost rank(s) %s at step %lld; world now %d ranks (dp=%d); resuming at step %lld",
            RankList(lost).c_str(), static_cast<long long>(interrupted_step), group.world_size(),
            group.world_size(), static_cast<long long>(resumed + 1)));
        return resumed;
      } catch (const RankLostError&) {
        // Another rank was lost while recovering: once more, without it.
      }
    }
  };
  // At a step boundary: ranks of a node that joined are admitted and get
  // the state. Returns the steps done.
  const auto admit = [&](int64_t steps_completed) {
    const std::optional<GrownGroup> grown = group.AdmitJoiners();
    if (!grown) return steps_completed;
    const int64_t resumed = take_state_from_main(steps_completed, true);
    say(
        Format("admitted rank(s) %s after step %lld; world now %d ranks (dp=%d); resuming at "
               "step %lld",
               RankList(grown->joined_ranks).c_str(), static_cast<long long>(steps_completed),
               group.world_size(), group.world_size(), static_cast<long long>(resumed + 1)));
    return resumed;
  };
  const bool recovers = group.recovers_from_loss();

  if (joiner) {
    // The survivors broadcast at their admission; take it, and start there.
    const int64_t resumed = take_state_from_main(0, true);
    summary.first_step = resumed;
  }
  bool just_joined = joiner;

  std::vector<double> step_seconds;
  for (int64_t step = progress.steps_done; step < options.steps; ++step) {
    KillSelfIfAskedForTests(step + 1);
    DelayStepIfAskedForTests();
    const Clock::time_point step_start = Clock::now();
    int64_t steps_completed = step;
    float loss = 0.0f, norm = 0.0f;
    try {
      // A joiner's first step starts at the boundary that admitted it.
      if (recovers && !std::exchange(just_joined, false)) admit(step);
      std::tie(loss, norm) = device ? device_step(step + 1) : host_step();
      steps_completed = step + 1;
      group.AllReduceAverage(std::span<float>(&loss, 1));
    } catch (const RankLostError&) {
      if (!recovers) throw;
      step = recover(step + 1, steps_completed) - 1;  // the loop's ++step resumes there
      continue;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    step_seconds.push_back(seconds);

    summary.step_losses.push_back(loss);
    summary.steps_done = step + 1;
    if ((step + 1) % options.log_every == 0 || step + 1 == options.steps) {
      say(Format("step %4lld/%lld | loss %.4f | grad norm %.3f | %7.1f ms | %8.0f tok/s",
                 static_cast<long long>(step + 1), static_cast<long long>(options.steps), loss,
                 norm, seconds * 1e3, tokens_per_step / seconds));
    }
    const bool last = step + 1 == options.steps;
    if (!last && options.val_every > 0 && (step + 1) % options.val_every == 0) validate(step + 1);
    if (!last && options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0) {
      save(step + 1);
    }
  }
  summary.steps_done = std::max(summary.steps_done, progress.steps_done);
  validate(summary.steps_done);
  if (summary.steps_done > progress.steps_done) save(summary.steps_done);

  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!step_seconds.empty()) {
    // One parseable line (scripts/gpt2_gpu_bench.sh reads it).
    const Throughput throughput =
        MeasureThroughput(step_seconds, options.throughput_skip_steps, tokens_per_step);
    say(
        Format("throughput: tokens_per_s=%.0f per_gpu=%.0f step_ms=%.2f ranks=%d dtype=%s "
               "grad_sync=%s place=%s steps=%lld",
               throughput.tokens_per_s, throughput.tokens_per_s / group.world_size(),
               throughput.step_ms, group.world_size(), DtypeName(options.dtype),
               GradientSyncName(EffectiveGradientSync(options, group, device != nullptr)),
               device ? "gpu" : "host", static_cast<long long>(throughput.steps)));
  }
  if (!summary.step_losses.empty()) {
    say(Format("done: steps %lld..%lld in %.2f s, train loss %.4f -> %.4f",
               static_cast<long long>(summary.first_step + 1),
               static_cast<long long>(summary.steps_done), summary.seconds,
               summary.step_losses.front(), summary.step_losses.back()));
  } else {
    say(Format("done: nothing to do, %lld of %lld steps already taken",
               static_cast<long long>(summary.steps_done), static_cast<long long>(options.steps)));
  }
  return summary;
}

}  // namespace infini::examples::gpt2
