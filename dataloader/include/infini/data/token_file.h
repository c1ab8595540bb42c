#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace infini::data {

// llm.c token files: a header of 256 little-endian int32 (magic, version,
// token count, the rest zero) followed by the tokens. The header says which
// of llm.c's two formats a file is:
//   GPT-2:    magic 20240520, version 1, tokens as uint16
//   LLaMA-3:  magic 20240801, version 7, tokens as uint32
inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int32_t kLlama3TokenFileMagic = 20240801;
inline constexpr int32_t kLlama3TokenFileVersion = 7;
inline constexpr size_t kTokenFileHeaderInts = 256;
inline constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

// Tokens of either width, read as uint32 (a view; the owner keeps the
// memory alive).
class TokenSpan {
 public:
  TokenSpan() = default;
  TokenSpan(std::span<const uint16_t> tokens)  // NOLINT(google-explicit-constructor)
      : data_(tokens.data()), size_(tokens.size()), token_bytes_(2) {}
  TokenSpan(std::span<const uint32_t> tokens)  // NOLINT(google-explicit-constructor)
      : data_(tokens.data()), size_(tokens.size()), token_bytes_(4) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int token_bytes() const { return token_bytes_; }  // 2 (GPT-2) or 4 (LLaMA-3)
  uint32_t operator[](size_t index) const {
    return token_bytes_ == 2 ? static_cast<const uint16_t*>(data_)[index]
                             : static_cast<const uint32_t*>(data_)[index];
  }
  TokenSpan subspan(size_t offset, size_t count) const {
    TokenSpan part = *this;
    part.data_ = static_cast<const char*>(data_) + offset * static_cast<size_t>(token_bytes_);
    part.size_ = count;
    return part;
  }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  int token_bytes_ = 2;
};

// Writes `tokens` as a token file in GPT-2's format (WriteTokenFile) or
// LLaMA-3's (WriteLlama3TokenFile). The file appears whole or not at all (written beside
// it, then renamed). Throws FileFormatError naming the path when it cannot be
// written, InvalidArgumentError for more tokens than the header's int32 count
// can hold.
void WriteTokenFile(const std::string& path, std::span<const uint16_t> tokens);
void WriteLlama3TokenFile(const std::string& path, std::span<const uint32_t> tokens);

// A token file of either format, mapped read-only. Throws FileFormatError
// naming the path for a missing or unreadable file, a short header, an
// unknown magic, a version that does not match the magic, or a size that
// does not match the header's token count.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  int token_bytes() const { return token_bytes_; }  // 2 (GPT-2) or 4 (LLaMA-3)
  TokenSpan tokens() const;

 private:
  std::string path_;
  int64_t num_tokens_ = 0;
  int token_bytes_ = 2;
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
  virtual TokenSpan Window(int64_t sample_index) const = 0;
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
  TokenSpan Window(int64_t sample_index) const override;

 private:
  TokenFile file_;
  int64_t sequence_length_;
  int64_t num_samples_;
};

}  // namespace infini::data
