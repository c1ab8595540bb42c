#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace infini::data {

// llm.c token file: a header of 256 little-endian int32 (magic 20240520,
// version 1, token count, the rest zero) followed by the tokens as uint16.
inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderInts = 256;
inline constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

// Writes `tokens` as a token file. The file appears whole or not at all
// (written beside it, then renamed). Throws FileFormatError naming the path
// when it cannot be written, InvalidArgumentError for more tokens than the
// header's int32 count can hold.
void WriteTokenFile(const std::string& path, std::span<const uint16_t> tokens);

// A token file mapped read-only. Throws FileFormatError naming the path for
// a missing or unreadable file, a short header, a wrong magic or version, or
// a size that does not match the header's token count.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  std::span<const uint16_t> tokens() const;

 private:
  std::string path_;
  int64_t num_tokens_ = 0;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
};

// Where a loader reads training samples: each sample is a window of
// sequence_length() + 1 tokens (input = window[0, T), target = window[1, T+1)).
// Implementations are read concurrently from several threads.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t sequence_length() const = 0;
  // The sequence_length() + 1 tokens of sample `sample_index`.
  virtual std::span<const uint16_t> Window(int64_t sample_index) const = 0;
};

// A token file served as samples: sample i is tokens [i·T, i·T + T + 1), so
// consecutive windows share one token (as llm.c reads them) and
// num_samples = (num_tokens - 1) / T.
class TokenDataset : public SampleSource {
 public:
  // Throws FileFormatError (see TokenFile), or InvalidArgumentError for a
  // non-positive sequence_length or a file with fewer than T + 1 tokens.
  TokenDataset(const std::string& path, int64_t sequence_length);

  const TokenFile& file() const { return file_; }
  int64_t num_samples() const override { return num_samples_; }
  int64_t sequence_length() const override { return sequence_length_; }
  std::span<const uint16_t> Window(int64_t sample_index) const override;

 private:
  TokenFile file_;
  int64_t sequence_length_;
  int64_t num_samples_;
};

}  // namespace infini::data
