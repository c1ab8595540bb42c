#include "checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "infini/common/one_line.h"

namespace infini::examples::gpt2 {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'I', 'N', 'F', 'G', 'P', 'T', '2', 'C'};
constexpr int64_t kVersion = 1;

// Fixed-size header; every field int64 (host byte order).
struct Header {
  char magic[8];
  int64_t version;
  int64_t vocab_size, max_sequence_length, num_layers, num_heads, channels;
  int64_t num_parameters;
  int64_t steps_done, consumed_samples, optimizer_steps;
};

void WriteFloats(std::ofstream& out, std::span<const float> values) {
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size_bytes()));
}

void ReadFloats(std::ifstream& in, std::span<float> values, const std::string& path) {
  in.read(reinterpret_cast<char*>(values.data()),
          static_cast<std::streamsize>(values.size_bytes()));
  if (!in) throw CheckpointError("checkpoint '" + OneLine(path) + "' is truncated");
}

void ExpectField(const std::string& path, const char* flag, int64_t saved, int64_t current) {
  if (saved != current) {
    throw CheckpointError("checkpoint '" + OneLine(path) + "' holds a model with --" + flag + "=" +
                          std::to_string(saved) + ", this run has --" + flag + "=" +
                          std::to_string(current) + " (use the same model flags, or another " +
                          "--checkpoint_dir)");
  }
}

}  // namespace

std::string CheckpointPath(const std::string& directory, int64_t steps_done) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld.ckpt", static_cast<long long>(steps_done));
  return (fs::path(directory) / name).string();
}

void SaveCheckpoint(const std::string& directory, const Model& model, AdamW& optimizer,
                    const TrainingProgress& progress) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) {
    throw CheckpointError("--checkpoint_dir='" + OneLine(directory) +
                          "': cannot create it: " + error.message());
  }
  const std::string path = CheckpointPath(directory, progress.steps_done);
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  const ModelConfig& config = model.config();
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.vocab_size = config.vocab_size;
  header.max_sequence_length = config.max_sequence_length;
  header.num_layers = config.num_layers;
  header.num_heads = config.num_heads;
  header.channels = config.channels;
  header.num_parameters = model.num_parameters();
  header.steps_done = progress.steps_done;
  header.consumed_samples = progress.consumed_samples;
  header.optimizer_steps = optimizer.steps_taken();
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    WriteFloats(out, model.parameters());
    WriteFloats(out, optimizer.first_moment());
    WriteFloats(out, optimizer.second_moment());
    out.flush();
    if (!out) {
      std::remove(temporary.c_str());
      throw CheckpointError("cannot write checkpoint '" + OneLine(temporary) + "'");
    }
  }
  fs::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    throw CheckpointError("cannot rename '" + OneLine(temporary) + "' to '" + OneLine(path) +
                          "': " + error.message());
  }
}

std::string LatestCheckpoint(const std::string& directory) {
  std::error_code error;
  std::string latest;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    // step_NNNNNNNN.ckpt: zero-padded, so the largest name has the most steps.
    if (name.rfind("step_", 0) == 0 && name.size() > 10 &&
        name.compare(name.size() - 5, 5, ".ckpt") == 0 &&
        name > fs::path(latest).filename().string()) {
      latest = it->path().string();
    }
  }
  return latest;
}

TrainingProgress LoadCheckpoint(const std::string& path, Model& model, AdamW& optimizer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot open checkpoint '" + OneLine(path) + "'");
  Header header{};
  in.read(reinterpret_cast<char*>(&header), sizeof(header));
  if (!in || std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError("'" + OneLine(path) + "' is not a gpt2 checkpoint (bad header)");
  }
  if (header.version != kVersion) {
    throw CheckpointError("checkpoint '" + OneLine(path) + "' has version " +
                          std::to_string(header.version) + ", expected " +
                          std::to_string(kVersion));
  }
  const ModelConfig& config = model.config();
  ExpectField(path, "num_layers", header.num_layers, config.num_layers);
  ExpectField(path, "num_heads", header.num_heads, config.num_heads);
  ExpectField(path, "channels", header.channels, config.channels);
  ExpectField(path, "sequence_length", header.max_sequence_length, config.max_sequence_length);
  ExpectField(path, "vocab_size", header.vocab_size, config.vocab_size);
  if (header.num_parameters != model.num_parameters() || header.steps_done < 0 ||
      header.consumed_samples < 0 || header.optimizer_steps < 0) {
    throw CheckpointError("checkpoint '" + OneLine(path) + "' has an inconsistent header");
  }
  ReadFloats(in, model.parameters(), path);
  ReadFloats(in, optimizer.first_moment(), path);
  ReadFloats(in, optimizer.second_moment(), path);
  optimizer.set_steps_taken(header.optimizer_steps);
  return {header.steps_done, header.consumed_samples};
}

}  // namespace infini::examples::gpt2
