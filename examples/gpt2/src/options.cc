#include "options.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <sstream>

namespace infini::examples::gpt2 {
namespace {

std::string Quoted(const std::string& name, const std::string& value) {
  return "--" + name + "='" + value + "'";
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
  constexpr int64_t kMax = int64_t{1} << 40;
  return {
      {"num_layers", "transformer blocks (default 2)", false,
       integer(&o->model.num_layers, "num_layers", 1, 256)},
      {"num_heads", "attention heads, a divisor of --channels (default 4)", false,
       integer(&o->model.num_heads, "num_heads", 1, 16384)},
      {"channels", "model width (default 64)", false,
       integer(&o->model.channels, "channels", 1, 16384)},
      {"sequence_length", "tokens per sample (default 64)", false,
       integer(&o->model.max_sequence_length, "sequence_length", 1, 8192)},
      {"micro_batch_size", "samples per rank per micro-step (default 4)", false,
       integer(&o->micro_batch_size, "micro_batch_size", 1, 1 << 20)},
      {"gradient_accumulation_steps", "micro-steps per optimizer step (default 1)", false,
       integer(&o->gradient_accumulation_steps, "gradient_accumulation_steps", 1, 1 << 20)},
      {"steps", "optimizer steps to take, in total across resumes (default 20)", false,
       integer(&o->steps, "steps", 0, kMax)},
      {"learning_rate", "AdamW learning rate (default 3e-3)", false,
       [o](const std::string& v) {
         o->learning_rate = ParsePositiveOrZero("learning_rate", v, false);
       }},
      {"weight_decay", "AdamW decoupled weight decay on matrices (default 0)", false,
       [o](const std::string& v) {
         o->weight_decay = ParsePositiveOrZero("weight_decay", v, true);
       }},
      {"grad_clip", "clip the global gradient norm to this; 0 disables (default 1)", false,
       [o](const std::string& v) { o->grad_clip = ParsePositiveOrZero("grad_clip", v, true); }},
      {"seed", "weights and data order (default 1337)", false,
       [o](const std::string& v) {
         o->seed = static_cast<uint64_t>(ParseInteger("seed", v, 0, INT64_MAX));
       }},
      {"shuffle", "shuffle samples each epoch, seeded by --seed (default true)", true,
       [o](const std::string& v) { o->shuffle = ParseBool("shuffle", v); }},
      {"train_data", "llm.c .bin token file (default: the bundled tiny corpus)", false,
       [o](const std::string& v) { o->train_data = v; }},
      {"val_data", "llm.c .bin token file for validation (default: bundled held-out text)", false,
       [o](const std::string& v) { o->val_data = v; }},
      {"val_every", "steps between validation losses; 0: after the last step only", false,
       integer(&o->val_every, "val_every", 0, kMax)},
      {"val_batches", "micro-batches per rank per validation; 0 disables (default 4)", false,
       integer(&o->val_batches, "val_batches", 0, 1 << 20)},
      {"checkpoint_dir", "save weights, optimizer and data position here", false,
       [o](const std::string& v) { o->checkpoint_dir = v; }},
      {"checkpoint_every", "steps between checkpoints; 0: after the last step only", false,
       integer(&o->checkpoint_every, "checkpoint_every", 0, kMax)},
      {"resume", "continue from the latest checkpoint in --checkpoint_dir, if any", true,
       [o](const std::string& v) { o->resume = ParseBool("resume", v); }},
      {"ccl_backend", "collective backend (default $INFINI_CCL_BACKEND, else auto)", false,
       [o](const std::string& v) { o->ccl_backend = v; }},
      {"log_every", "steps between progress lines (default 1)", false,
       integer(&o->log_every, "log_every", 1, kMax)},
  };
}

}  // namespace

std::string TrainUsage() {
  TrainOptions unused;
  std::ostringstream text;
  text << "gpt2: data-parallel training of a small GPT-2 on the host (byte-level tokens).\n"
          "  gpt2 [flags]                                   one process\n"
          "  infini_run --ccl_backend=gloo --nproc_per_node=2 gpt2 [flags]\n"
          "Flags (--name=value or --name value):\n";
  for (const Flag& flag : MakeFlags(&unused)) {
    text << "  --" << flag.name
         << std::string(flag.name.size() < 28 ? 28 - flag.name.size() : 1, ' ') << flag.help
         << "\n";
  }
  return text.str();
}

TrainOptions ParseTrainOptions(const std::vector<std::string>& arguments) {
  TrainOptions options;
  const std::vector<Flag> flags = MakeFlags(&options);
  for (size_t i = 0; i < arguments.size(); ++i) {
    std::string argument = arguments[i];
    if (argument == "--help" || argument == "-help" || argument == "-h") {
      options.help = true;
      continue;
    }
    if (argument.rfind("--", 0) == 0) {
      argument = argument.substr(2);
    } else if (argument.rfind('-', 0) == 0 && argument.size() > 1) {
      argument = argument.substr(1);
    } else {
      throw UsageError("unexpected argument '" + argument +
                       "': expected --flag=value (see --help)");
    }
    const size_t equals = argument.find('=');
    const std::string name = argument.substr(0, equals);
    const Flag* flag = nullptr;
    for (const Flag& candidate : flags) {
      if (candidate.name == name) flag = &candidate;
    }
    if (flag == nullptr) {
      throw UsageError("unknown flag --" + name + " (see --help)");
    }
    std::string value;
    if (equals != std::string::npos) {
      value = argument.substr(equals + 1);
    } else if (flag->is_bool) {
      value = "true";
    } else if (i + 1 < arguments.size()) {
      value = arguments[++i];
    } else {
      throw UsageError("--" + name + " needs a value");
    }
    flag->set(value);
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

}  // namespace infini::examples::gpt2
