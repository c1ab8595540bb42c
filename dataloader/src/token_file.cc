#include "infini/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "infini/common/one_line.h"
#include "infini/data/error.h"

namespace infini::data {
namespace {

std::string SystemError() { return std::strerror(errno); }

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

void WriteAll(int fd, const void* data, size_t bytes, const std::string& path) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd, cursor, bytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw FileFormatError("cannot write token file '" + OneLine(path) + "': " + SystemError());
    }
    cursor += written;
    bytes -= static_cast<size_t>(written);
  }
}

// Writes the header for `magic`/`version`, then `token_bytes` of tokens.
void WriteTokenFileBytes(const std::string& path, int32_t magic, int32_t version, size_t num_tokens,
                         const void* tokens, size_t token_bytes) {
  if (num_tokens > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InvalidArgumentError("token count " + std::to_string(num_tokens) + " for '" +
                               OneLine(path) +
                               "': the llm.c header holds at most 2147483647 tokens");
  }
  std::array<int32_t, kTokenFileHeaderInts> header{};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(num_tokens);

  const std::string temporary_path = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw FileFormatError("cannot create token file '" + OneLine(temporary_path) +
                          "': " + SystemError());
  }
  try {
    FdCloser closer(fd);
    WriteAll(fd, header.data(), kTokenFileHeaderBytes, temporary_path);
    WriteAll(fd, tokens, token_bytes, temporary_path);
    if (::fsync(fd) != 0) {
      throw FileFormatError("cannot flush token file '" + OneLine(temporary_path) +
                            "': " + SystemError());
    }
  } catch (...) {
    ::unlink(temporary_path.c_str());
    throw;
  }
  if (::rename(temporary_path.c_str(), path.c_str()) != 0) {
    const std::string reason = SystemError();
    ::unlink(temporary_path.c_str());
    throw FileFormatError("cannot rename '" + OneLine(temporary_path) + "' to '" + OneLine(path) +
                          "': " + reason);
  }
}

}  // namespace

void WriteTokenFile(const std::string& path, std::span<const uint16_t> tokens) {
  WriteTokenFileBytes(path, kTokenFileMagic, kTokenFileVersion, tokens.size(), tokens.data(),
                      tokens.size_bytes());
}

void WriteLlama3TokenFile(const std::string& path, std::span<const uint32_t> tokens) {
  WriteTokenFileBytes(path, kLlama3TokenFileMagic, kLlama3TokenFileVersion, tokens.size(),
                      tokens.data(), tokens.size_bytes());
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw FileFormatError("cannot open token file '" + OneLine(path) + "': " + SystemError());
  FdCloser closer(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    throw FileFormatError("cannot stat token file '" + OneLine(path) + "': " + SystemError());
  }
  if (!S_ISREG(info.st_mode)) {
    throw FileFormatError("token file '" + OneLine(path) + "' is not a regular file");
  }
  const auto file_bytes = static_cast<uint64_t>(info.st_size);
  if (file_bytes < kTokenFileHeaderBytes) {
    throw FileFormatError("token file '" + OneLine(path) + "' has " + std::to_string(file_bytes) +
                          " bytes: expected at least the " + std::to_string(kTokenFileHeaderBytes) +
                          "-byte llm.c header (truncated or not a token file)");
  }
  mapping_bytes_ = static_cast<size_t>(file_bytes);
  mapping_ = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    throw FileFormatError("cannot map token file '" + OneLine(path) + "': " + SystemError());
  }
  try {
    std::array<int32_t, kTokenFileHeaderInts> header{};
    std::memcpy(header.data(), mapping_, kTokenFileHeaderBytes);
    int32_t expected_version = 0;
    const char* format = "";
    if (header[0] == kTokenFileMagic) {
      expected_version = kTokenFileVersion;
      token_bytes_ = 2;
      format = "GPT-2, uint16 tokens";
    } else if (header[0] == kLlama3TokenFileMagic) {
      expected_version = kLlama3TokenFileVersion;
      token_bytes_ = 4;
      format = "LLaMA-3, uint32 tokens";
    } else {
      throw FileFormatError(
          "token file '" + OneLine(path) + "' has magic " + std::to_string(header[0]) +
          ": expected " + std::to_string(kTokenFileMagic) + " (GPT-2) or " +
          std::to_string(kLlama3TokenFileMagic) + " (LLaMA-3), an llm.c .bin token file");
    }
    if (header[1] != expected_version) {
      throw FileFormatError("token file '" + OneLine(path) + "' has version " +
                            std::to_string(header[1]) + ": expected " +
                            std::to_string(expected_version) + " for magic " +
                            std::to_string(header[0]) + " (" + format + ")");
    }
    if (header[2] < 0) {
      throw FileFormatError("token file '" + OneLine(path) + "' has token count " +
                            std::to_string(header[2]) + ": expected a number >= 0");
    }
    num_tokens_ = header[2];
    const uint64_t expected_bytes = kTokenFileHeaderBytes + static_cast<uint64_t>(num_tokens_) *
                                                                static_cast<uint64_t>(token_bytes_);
    if (file_bytes != expected_bytes) {
      throw FileFormatError("token file '" + OneLine(path) + "' has " + std::to_string(file_bytes) +
                            " bytes: its header announces " + std::to_string(num_tokens_) +
                            " tokens, expected " + std::to_string(expected_bytes) + " bytes (" +
                            (file_bytes < expected_bytes ? "truncated" : "trailing data") + ")");
    }
  } catch (...) {
    ::munmap(mapping_, mapping_bytes_);
    mapping_ = nullptr;
    throw;
  }
}

TokenFile::~TokenFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

TokenSpan TokenFile::tokens() const {
  const auto* base = static_cast<const char*>(mapping_) + kTokenFileHeaderBytes;
  const auto count = static_cast<size_t>(num_tokens_);
  if (token_bytes_ == 4) {
    return std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(base), count);
  }
  return std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(base), count);
}

TokenDataset::TokenDataset(const std::string& path, int64_t sequence_length)
    : file_(path), sequence_length_(sequence_length) {
  if (sequence_length <= 0) {
    throw InvalidArgumentError("sequence_length=" + std::to_string(sequence_length) +
                               ": expected a positive number");
  }
  if (file_.num_tokens() < sequence_length + 1) {
    throw InvalidArgumentError(
        "token file '" + OneLine(path) + "' has " + std::to_string(file_.num_tokens()) +
        " tokens: expected at least sequence_length + 1 = " + std::to_string(sequence_length + 1) +
        " for one sample");
  }
  num_samples_ = (file_.num_tokens() - 1) / sequence_length;
}

TokenSpan TokenDataset::Window(int64_t sample_index) const {
  if (sample_index < 0 || sample_index >= num_samples_) {
    throw InvalidArgumentError("sample index " + std::to_string(sample_index) + " of '" +
                               OneLine(file_.path()) + "': expected [0, " +
                               std::to_string(num_samples_) + ")");
  }
  return file_.tokens().subspan(static_cast<size_t>(sample_index * sequence_length_),
                                static_cast<size_t>(sequence_length_ + 1));
}

}  // namespace infini::data
