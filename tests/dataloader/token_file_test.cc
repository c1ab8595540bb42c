#include "infini/data/token_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infini/data/error.h"
#include "test_files.h"

namespace infini::data {
namespace {

using testing::TemporaryDirectory;
using testing::TokenFileBytes;
using testing::WriteBytes;

std::vector<uint16_t> Ramp(size_t count) {
  std::vector<uint16_t> tokens(count);
  for (size_t i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>((i * 2654435761u) >> 7);
  return tokens;
}

// Expects opening `path` to throw FileFormatError whose message names the
// file and contains `expected_words`.
void ExpectFileFormatError(const std::string& path, const std::string& expected_words) {
  try {
    TokenFile file(path);
    FAIL() << path << " was accepted";
  } catch (const FileFormatError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(expected_words), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

TEST(TokenFile, RoundTripsTokensThroughTheWriter) {
  TemporaryDirectory directory;
  const std::string path = directory.File("tokens.bin");
  const std::vector<uint16_t> tokens = Ramp(5000);
  WriteTokenFile(path, tokens);
  TokenFile file(path);
  EXPECT_EQ(file.num_tokens(), 5000);
  EXPECT_EQ(file.token_bytes(), 2);
  EXPECT_EQ(testing::ToVector(file.tokens()), std::vector<uint32_t>(tokens.begin(), tokens.end()));
}

TEST(TokenFile, ReadsLlama3FilesOfUint32TokensChosenByTheHeader) {
  TemporaryDirectory directory;
  const std::string path = directory.File("llama3.bin");
  // LLaMA-3's vocabulary (128256) needs more than 16 bits.
  const std::vector<uint32_t> tokens = {128000, 9906, 65536, 0, 128255};
  WriteLlama3TokenFile(path, tokens);
  std::ifstream stream(path, std::ios::binary);
  std::vector<int32_t> header(256);
  stream.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 5);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 5u * 4u);

  TokenFile file(path);
  EXPECT_EQ(file.num_tokens(), 5);
  EXPECT_EQ(file.token_bytes(), 4);
  EXPECT_EQ(testing::ToVector(file.tokens()), tokens);
}

TEST(TokenFile, RejectsALlama3HeaderWithAGpt2Version) {
  TemporaryDirectory directory;
  const std::string path = directory.File("llama3_v1.bin");
  WriteBytes(path, TokenFileBytes(20240801, 1, 2, 8));
  ExpectFileFormatError(path, "has version 1: expected 7 for magic 20240801");
}

TEST(TokenFile, SizesLlama3TokensAtFourBytes) {
  TemporaryDirectory directory;
  const std::string path = directory.File("llama3_short.bin");
  // Ten tokens in twenty bytes is a whole GPT-2 file but half a LLaMA-3 one.
  WriteBytes(path, TokenFileBytes(20240801, 7, 10, 20));
  ExpectFileFormatError(path, "truncated");
}

TEST(TokenFile, WritesTheLlmCHeader) {
  TemporaryDirectory directory;
  const std::string path = directory.File("tokens.bin");
  WriteTokenFile(path, std::vector<uint16_t>{1, 2, 65535});
  std::ifstream stream(path, std::ios::binary);
  std::vector<int32_t> header(256);
  stream.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  uint16_t last = 0;
  stream.seekg(1024 + 4);
  stream.read(reinterpret_cast<char*>(&last), 2);
  EXPECT_EQ(last, 65535);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 6u);
}

TEST(TokenFile, RoundTripsAnEmptyFile) {
  TemporaryDirectory directory;
  const std::string path = directory.File("empty.bin");
  WriteTokenFile(path, {});
  EXPECT_EQ(TokenFile(path).num_tokens(), 0);
}

TEST(TokenFile, RejectsAMissingFile) {
  TemporaryDirectory directory;
  ExpectFileFormatError(directory.File("missing.bin"), "cannot open");
}

TEST(TokenFile, RejectsADirectory) {
  TemporaryDirectory directory;
  const std::string path = directory.File("a_directory");
  std::filesystem::create_directory(path);
  ExpectFileFormatError(path, "not a regular file");
}

TEST(TokenFile, RejectsATruncatedHeader) {
  TemporaryDirectory directory;
  const std::string path = directory.File("short.bin");
  std::vector<char> bytes = TokenFileBytes(20240520, 1, 0, 0);
  bytes.resize(100);
  WriteBytes(path, bytes);
  ExpectFileFormatError(path, "has 100 bytes");
  WriteBytes(path, {});
  ExpectFileFormatError(path, "has 0 bytes");
}

TEST(TokenFile, RejectsTruncatedTokens) {
  TemporaryDirectory directory;
  const std::string path = directory.File("truncated.bin");
  WriteBytes(path, TokenFileBytes(20240520, 1, 100, 150));
  ExpectFileFormatError(path, "truncated");
}

TEST(TokenFile, RejectsTrailingData) {
  TemporaryDirectory directory;
  const std::string path = directory.File("trailing.bin");
  WriteBytes(path, TokenFileBytes(20240520, 1, 10, 21));
  ExpectFileFormatError(path, "trailing data");
}

TEST(TokenFile, RejectsAForeignFileByItsMagic) {
  TemporaryDirectory directory;
  const std::string path = directory.File("foreign.bin");
  std::vector<char> text(2000, 'x');
  WriteBytes(path, text);
  ExpectFileFormatError(path, "expected 20240520 (GPT-2) or 20240801 (LLaMA-3)");
  // llm.c's model checkpoint magic
  WriteBytes(path, TokenFileBytes(20240326, 1, 0, 0));
  ExpectFileFormatError(path, "has magic 20240326");
}

TEST(TokenFile, RejectsAnotherVersion) {
  TemporaryDirectory directory;
  const std::string path = directory.File("v2.bin");
  WriteBytes(path, TokenFileBytes(20240520, 2, 4, 8));
  ExpectFileFormatError(path, "has version 2: expected 1");
}

TEST(TokenFile, RejectsANegativeTokenCount) {
  TemporaryDirectory directory;
  const std::string path = directory.File("negative.bin");
  WriteBytes(path, TokenFileBytes(20240520, 1, -5, 0));
  ExpectFileFormatError(path, "token count -5");
}

TEST(TokenDataset, ServesLlama3WindowsWithTokensAbove65535) {
  TemporaryDirectory directory;
  const std::string path = directory.File("llama3.bin");
  std::vector<uint32_t> tokens(17);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = 100000 + static_cast<uint32_t>(i);
  WriteLlama3TokenFile(path, tokens);
  TokenDataset dataset(path, 4);
  EXPECT_EQ(dataset.num_samples(), 4);  // (17 - 1) / 4
  const TokenSpan window = dataset.Window(3);
  ASSERT_EQ(window.size(), 5u);
  for (size_t t = 0; t < 5; ++t) EXPECT_EQ(window[t], 100012u + t);
}

TEST(TokenDataset, ServesWindowsOfSequenceLengthPlusOneTokens) {
  TemporaryDirectory directory;
  const std::string path = directory.File("tokens.bin");
  const std::vector<uint16_t> tokens = Ramp(41);
  WriteTokenFile(path, tokens);
  TokenDataset dataset(path, 8);
  EXPECT_EQ(dataset.num_samples(), 5);  // (41 - 1) / 8
  for (int64_t i = 0; i < 5; ++i) {
    const auto window = dataset.Window(i);
    ASSERT_EQ(window.size(), 9u);
    for (size_t t = 0; t < 9; ++t) EXPECT_EQ(window[t], tokens[static_cast<size_t>(i * 8) + t]);
  }
  EXPECT_THROW(dataset.Window(5), InvalidArgumentError);
  EXPECT_THROW(dataset.Window(-1), InvalidArgumentError);
}

TEST(TokenDataset, RejectsAFileShorterThanOneSample) {
  TemporaryDirectory directory;
  const std::string path = directory.File("tiny.bin");
  WriteTokenFile(path, Ramp(8));
  try {
    TokenDataset dataset(path, 8);
    FAIL() << "8 tokens accepted for sequence_length 8";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("sequence_length + 1 = 9"), std::string::npos);
  }
  EXPECT_NO_THROW(TokenDataset(path, 7));
}

TEST(TokenDataset, RejectsANonPositiveSequenceLength) {
  TemporaryDirectory directory;
  const std::string path = directory.File("tokens.bin");
  WriteTokenFile(path, Ramp(100));
  EXPECT_THROW(TokenDataset(path, 0), InvalidArgumentError);
}

TEST(TokenFile, WriterReportsAnUnwritablePath) {
  TemporaryDirectory directory;
  EXPECT_THROW(WriteTokenFile(directory.File("no/such/dir/tokens.bin"), Ramp(3)), FileFormatError);
}

}  // namespace
}  // namespace infini::data
