#include "options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "infini/common/command_line.h"
#include "infini/common/one_line.h"

namespace infini::examples::gpt2 {
namespace {

std::string Quoted(const std::string& name, const std::string& value) {
  return flags::QuotedFlag(name, value);
}

int64_t ParseInteger(const std::string& name, const std::string& value, int64_t minimum,
                     int64_t maximum) {
  int64_t parsed = 0;
  const char* end = value.data() + value.size();
  auto [stop, error] = std::from_chars(value.data(), end, parsed);
  if (value.empty() || error != std::errc() || stop != end || parsed < minimum ||
      parsed > maximum) {
    throw UsageError(Quoted(name, value) + ": expected an integer in [" + std::to_string(minimum) +
                     ", " + std::to_string(maximum) + "]");
  }
  return parsed;
}

float ParsePositiveOrZero(const std::string& name, const std::string& value, bool allow_zero) {
  size_t used = 0;
  double parsed = 0.0;
  try {
    parsed = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (value.empty() || used != value.size() || !std::isfinite(parsed) || parsed < 0.0 ||
      (!allow_zero && parsed == 0.0)) {
    throw UsageError(Quoted(name, value) + ": expected a " +
                     (allow_zero ? "number >= 0" : "number > 0"));
  }
  return static_cast<float>(parsed);
}

bool ParseBool(const std::string& name, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  throw UsageError(Quoted(name, value) + ": expected true or false");
}

struct Flag {
  std::string name;
  std::string help;
  bool is_bool = false;
  std::function<void(const std::string&)> set;
};

std::vector<Flag> MakeFlags(TrainOptions* o) {
  auto integer = [](int64_t* field, const char* name, int64_t minimum, int64_t maximum) {
    return [=](const std::string& value) { *field = ParseInteger(name, value, minimum, maximum); };
  };
  // Token counts stop at 2^40; step counts at a billion (a billion steps of
  // the smallest model take weeks, and every step count times a step's
  // tokens stays far from overflowing int64).
  constexpr int64_t kMax = int64_t{1} << 40;
  constexpr int64_t kMaxSteps = 1'000'000'000;
  const auto set_dtype = [o](const std::string& v) {
    if (v == "float32") {
      o->dtype = TrainDtype::kFloat32;
    } else if (v == "bfloat16") {
      o->dtype = TrainDtype::kBFloat16;
    } else {
      throw UsageError(Quoted("dtype", v) + ": expected float32 or bfloat16");
    }
  };
  const auto set_model = [o](const std::string& v) {
    if (v != "tiny" && v != "d12") {
      throw UsageError(Quoted("model", v) +
                       ": expected tiny (sized by --num_layers, --num_heads, --channels) or d12 "
                       "(GPT-2 124M)");
    }
    o->model_name = v;
  };
  const auto text = [](std::string* field) {
    return [field](const std::string& v) { *field = v; };
  };
  return {
      {"model", "tiny (sized by the next three flags) or d12 (GPT-2 124M)", false, set_model},
      {"num_layers", "transformer blocks of --model=tiny", false,
       integer(&o->model.num_layers, "num_layers", 1, 256)},
      {"num_heads", "attention heads of --model=tiny, a divisor of --channels", false,
       integer(&o->model.num_heads, "num_heads", 1, 16384)},
      {"channels", "model width of --model=tiny", false,
       integer(&o->model.channels, "channels", 1, 16384)},
      {"sequence_length", "tokens per sample (d12 allows up to 1024)", false,
       integer(&o->sequence_length, "sequence_length", 1, 8192)},
      {"batch_size", "samples per rank per micro-step (alias --micro_batch_size)", false,
       integer(&o->micro_batch_size, "batch_size", 1, 1 << 20)},
      {"micro_batch_size", "", false,
       integer(&o->micro_batch_size, "micro_batch_size", 1, 1 << 20)},
      {"gradient_accumulation_steps", "micro-steps per optimizer step", false,
       integer(&o->gradient_accumulation_steps, "gradient_accumulation_steps", 1, 1 << 20)},
      {"total_batch_size",
       "tokens per optimizer step over all ranks; sets the accumulation (0: from it)", false,
       integer(&o->total_batch_size, "total_batch_size", 0, kMax)},
      {"num_iteration", "optimizer steps to take, in total across resumes (alias --steps)", false,
       integer(&o->steps, "num_iteration", 0, kMaxSteps)},
      {"steps", "", false, integer(&o->steps, "steps", 0, kMaxSteps)},
      {"dtype", "float32 or bfloat16 (GPU only; float32 master weights)", false, set_dtype},
      {"learning_rate", "AdamW learning rate", false,
       [o](const std::string& v) {
         o->learning_rate = ParsePositiveOrZero("learning_rate", v, false);
       }},
      {"weight_decay", "AdamW decoupled weight decay on matrices", false,
       [o](const std::string& v) {
         o->weight_decay = ParsePositiveOrZero("weight_decay", v, true);
       }},
      {"grad_clip", "clip the global gradient norm to this; 0 disables", false,
       [o](const std::string& v) { o->grad_clip = ParsePositiveOrZero("grad_clip", v, true); }},
      {"seed", "weights and data order", false,
       [o](const std::string& v) {
         o->seed = static_cast<uint64_t>(ParseInteger("seed", v, 0, INT64_MAX));
       }},
      {"shuffle", "shuffle samples each epoch, seeded by --seed", true,
       [o](const std::string& v) { o->shuffle = ParseBool("shuffle", v); }},
      {"input_bin",
       "llm.c .bin token file, GPT-2 or LLaMA-3 (default: the bundled tiny corpus; "
       "alias --train_data)",
       false, text(&o->train_data)},
      {"train_data", "", false, text(&o->train_data)},
      {"input_val_bin",
       "token file for validation (default: bundled held-out text; alias "
       "--val_data)",
       false, text(&o->val_data)},
      {"val_data", "", false, text(&o->val_data)},
      {"val_loss_every",
       "steps between validation losses; 0: after the last step only (alias "
       "--val_every)",
       false, integer(&o->val_every, "val_loss_every", 0, kMaxSteps)},
      {"val_every", "", false, integer(&o->val_every, "val_every", 0, kMaxSteps)},
      {"val_batches", "micro-batches per rank per validation; 0 disables", false,
       integer(&o->val_batches, "val_batches", 0, 1 << 20)},
      {"checkpoint_dir", "save weights, optimizer and data position here", false,
       text(&o->checkpoint_dir)},
      {"checkpoint_every", "steps between checkpoints; 0: after the last step only", false,
       integer(&o->checkpoint_every, "checkpoint_every", 0, kMaxSteps)},
      {"resume", "continue from the latest checkpoint in --checkpoint_dir, if any", true,
       [o](const std::string& v) { o->resume = ParseBool("resume", v); }},
      {"ccl_backend", "collective backend (default $INFINI_CCL_BACKEND, else auto)", false,
       text(&o->ccl_backend)},
      {"nthread_per_process", "ranks per process, one thread and device each", false,
       [o](const std::string& v) {
         o->nthread_per_process = static_cast<int>(ParseInteger("nthread_per_process", v, 1, 64));
       }},
      {"overlap",
       "all-reduce gradient buckets during backward; false: one "
       "all-reduce after backward",
       true,
       [o](const std::string& v) {
         if (o->gradient_sync != GradientSync::kNone) {
           o->gradient_sync =
               ParseBool("overlap", v) ? GradientSync::kOverlap : GradientSync::kAfterBackward;
         }
       }},
      {"no_grad_sync", "skip gradient communication (ranks drift apart; for measuring only)", true,
       [o](const std::string& v) {
         if (ParseBool("no_grad_sync", v)) o->gradient_sync = GradientSync::kNone;
       }},
      {"bucket_size_mb", "gradient bucket size of --overlap in MiB (torch DDP's is 25)", false,
       integer(&o->bucket_size_mb, "bucket_size_mb", 1, 1 << 14)},
      {"register_buckets",
       "register --overlap's buckets with the communicator where the backend can ("
       "NCCL: ncclCommRegister)",
       true, [o](const std::string& v) { o->register_buckets = ParseBool("register_buckets", v); }},
      {"throughput_skip_steps", "first steps left out of the throughput average", false,
       integer(&o->throughput_skip_steps, "throughput_skip_steps", 0, kMaxSteps)},
      {"log_every", "steps between progress lines", false,
       integer(&o->log_every, "log_every", 1, kMaxSteps)},
  };
}

std::string Number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// What --help shows as `name`'s default: TrainOptions' own (options.h), the
// one place it is written; empty for none.
std::string DefaultText(const std::string& name, const TrainOptions& o) {
  const auto yes_no = [](bool value) { return std::string(value ? "true" : "false"); };
  const std::map<std::string, std::string> shown = {
      {"model", o.model_name},
      {"num_layers", std::to_string(o.model.num_layers)},
      {"num_heads", std::to_string(o.model.num_heads)},
      {"channels", std::to_string(o.model.channels)},
      {"sequence_length", std::to_string(o.sequence_length)},
      {"batch_size", std::to_string(o.micro_batch_size)},
      {"gradient_accumulation_steps", std::to_string(o.gradient_accumulation_steps)},
      {"total_batch_size", std::to_string(o.total_batch_size)},
      {"num_iteration", std::to_string(o.steps)},
      {"dtype", DtypeName(o.dtype)},
      {"learning_rate", Number(o.learning_rate)},
      {"weight_decay", Number(o.weight_decay)},
      {"grad_clip", Number(o.grad_clip)},
      {"seed", std::to_string(o.seed)},
      {"shuffle", yes_no(o.shuffle)},
      {"val_loss_every", std::to_string(o.val_every)},
      {"val_batches", std::to_string(o.val_batches)},
      {"checkpoint_every", std::to_string(o.checkpoint_every)},
      {"resume", yes_no(o.resume)},
      {"nthread_per_process", std::to_string(o.nthread_per_process)},
      {"overlap", yes_no(o.gradient_sync == GradientSync::kOverlap)},
      {"no_grad_sync", yes_no(o.gradient_sync == GradientSync::kNone)},
      {"bucket_size_mb", std::to_string(o.bucket_size_mb)},
      {"register_buckets", yes_no(o.register_buckets)},
      {"throughput_skip_steps", std::to_string(o.throughput_skip_steps)},
      {"log_every", std::to_string(o.log_every)},
  };
  const auto found = shown.find(name);
  return found == shown.end() ? "" : found->second;
}

// The one parser's table (infini/common/command_line.h) of MakeFlags'
// flags; an alias (no help) is accepted, not listed.
cli::CommandLine TrainCommandLine(TrainOptions* options) {
  std::vector<cli::Flag> flags;
  std::vector<Flag> own_flags = MakeFlags(options);
  for (Flag& own : own_flags) {
    const cli::FlagType type = own.is_bool ? cli::FlagType::kSwitch : cli::FlagType::kText;
    cli::Flag flag;
    flag.name = own.name;
    flag.type = type;
    flag.default_value = DefaultText(own.name, TrainOptions{});  // shown in --help only
    flag.show_default = !flag.default_value.empty();
    flag.help = own.help;
    flag.on_set = std::move(own.set);
    flags.push_back(std::move(flag));
  }
  cli::Program program;
  program.name = "gpt2";
  program.usage_line = "gpt2 [flags]  (--name=value or --name value)";
  program.description =
      "Data-parallel training of GPT-2, on the host (gloo) or the GPUs (nccl).\n"
      "  gpt2 [flags]                                   one process on the host\n"
      "  gpt2 --ccl_backend=nccl [flags]                one GPU\n"
      "  infini_run --ccl_backend=gloo --nproc_per_node=2 gpt2 [flags]\n"
      "  infini_run --ccl_backend=nccl --nproc_per_node=8 gpt2 --model=d12 --dtype=bfloat16\n";
  return cli::CommandLine(std::move(program), std::move(flags));
}

}  // namespace

std::string TrainUsage() {
  TrainOptions unused;
  return TrainCommandLine(&unused).Usage();
}

TrainOptions ParseTrainOptions(const std::vector<std::string>& arguments) {
  TrainOptions options;
  cli::CommandLine line = TrainCommandLine(&options);
  try {
    if (!line.Parse(arguments)) {
      options.help = true;
      return options;
    }
  } catch (const UsageError&) {
    throw;
  } catch (const cli::UsageError& error) {
    throw UsageError(error.what());
  }
  const auto given = [&](const char* name) { return line.Given(name); };
  if (options.model_name == "d12") {
    for (const char* name : {"num_layers", "num_heads", "channels"}) {
      if (given(name)) {
        throw UsageError("--" + std::string(name) +
                         " sizes --model=tiny only: --model=d12 is 12 layers, 12 heads, 768 "
                         "channels");
      }
    }
    options.model.num_layers = 12;
    options.model.num_heads = 12;
    options.model.channels = 768;
    options.model.vocab_size = 50257;
    options.model.max_sequence_length = 1024;
    if (options.sequence_length > 1024) {
      throw UsageError("--sequence_length=" + std::to_string(options.sequence_length) +
                       ": expected at most 1024 with --model=d12");
    }
  } else {
    options.model.max_sequence_length = options.sequence_length;
  }
  if (options.total_batch_size > 0 && given("gradient_accumulation_steps")) {
    throw UsageError(
        "--total_batch_size and --gradient_accumulation_steps both set the accumulation: give "
        "one");
  }
  if (options.model.channels % options.model.num_heads != 0) {
    throw UsageError(
        "--num_heads=" + std::to_string(options.model.num_heads) +
        ": expected a divisor of --channels=" + std::to_string(options.model.channels));
  }
  if (options.resume && options.checkpoint_dir.empty()) {
    throw UsageError("--resume needs --checkpoint_dir=DIR to resume from");
  }
  return options;
}

int64_t AccumulationSteps(const TrainOptions& options, int64_t data_parallel_size) {
  if (options.total_batch_size == 0) return options.gradient_accumulation_steps;
  const int64_t tokens_per_micro_step =
      options.micro_batch_size * options.sequence_length * data_parallel_size;
  if (options.total_batch_size % tokens_per_micro_step != 0) {
    throw UsageError(
        "--total_batch_size=" + std::to_string(options.total_batch_size) +
        ": expected a multiple of --batch_size x --sequence_length x ranks = " +
        std::to_string(options.micro_batch_size) + " x " + std::to_string(options.sequence_length) +
        " x " + std::to_string(data_parallel_size) + " = " + std::to_string(tokens_per_micro_step));
  }
  return options.total_batch_size / tokens_per_micro_step;
}

const char* DtypeName(TrainDtype dtype) {
  return dtype == TrainDtype::kBFloat16 ? "bfloat16" : "float32";
}

}  // namespace infini::examples::gpt2
