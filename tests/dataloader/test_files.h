#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "infini/data/token_file.h"

namespace infini::data::testing {

// A fresh directory removed when the test ends.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "infini_dataloader_test_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TemporaryDirectory() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// An llm.c header with the given fields followed by `token_bytes` bytes.
inline std::vector<char> TokenFileBytes(int32_t magic, int32_t version, int32_t num_tokens,
                                        size_t token_bytes) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = num_tokens;
  std::vector<char> bytes(reinterpret_cast<const char*>(header.data()),
                          reinterpret_cast<const char*>(header.data()) + 1024);
  for (size_t i = 0; i < token_bytes; ++i) bytes.push_back(static_cast<char>(i * 7));
  return bytes;
}

// The tokens of `tokens` as uint32, for comparisons.
inline std::vector<uint32_t> ToVector(TokenSpan tokens) {
  std::vector<uint32_t> values(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) values[i] = tokens[i];
  return values;
}

}  // namespace infini::data::testing
