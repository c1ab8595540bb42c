// Converts text into an llm.c .bin token file that TokenDataset reads.
//
//   make_token_bin --input=corpus.txt --output=corpus.bin              # bytes
//   make_token_bin --input=ids.txt --output=corpus.bin --input_format=ids
//
// bytes: every byte of the file is one token (vocabulary of 256), enough for
//        tests and character-level models.
// ids:   whitespace-separated token ids in [0, 65535], e.g. the output of a
//        real tokenizer run elsewhere.

#include <gflags/gflags.h>

#include <cctype>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "infini/common/flags.h"
#include "infini/common/one_line.h"
#include "infini/data/error.h"
#include "infini/data/token_file.h"

DEFINE_string(input, "", "Text file to convert");
DEFINE_string(output, "", "Token file to write (llm.c .bin, version 1)");
DEFINE_string(input_format, "bytes", "bytes: one token per byte; ids: whitespace-separated ids");

namespace {

using infini::OneLine;
using infini::data::FileFormatError;
using infini::data::InvalidArgumentError;

std::string ReadWholeFile(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw FileFormatError("cannot open --input='" + OneLine(path) + "'");
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

std::vector<uint16_t> BytesToTokens(const std::string& text) {
  return {reinterpret_cast<const unsigned char*>(text.data()),
          reinterpret_cast<const unsigned char*>(text.data()) + text.size()};
}

std::vector<uint16_t> IdsToTokens(const std::string& text, const std::string& path) {
  std::vector<uint16_t> tokens;
  size_t cursor = 0;
  int64_t line = 1;
  while (cursor < text.size()) {
    const char c = text[cursor];
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (c == '\n') ++line;
      ++cursor;
      continue;
    }
    const size_t begin = cursor;
    while (cursor < text.size() && !std::isspace(static_cast<unsigned char>(text[cursor]))) {
      ++cursor;
    }
    const std::string word = text.substr(begin, cursor - begin);
    const bool all_digits =
        word.size() <= 5 && word.find_first_not_of("0123456789") == std::string::npos;
    const long value = all_digits ? std::stol(word) : -1;
    if (value < 0 || value > 65535) {
      throw InvalidArgumentError("--input='" + OneLine(path) + "' line " + std::to_string(line) +
                                 ": token '" + OneLine(word) + "': expected an id in [0, 65535]");
    }
    tokens.push_back(static_cast<uint16_t>(value));
  }
  return tokens;
}

void Convert() {
  if (FLAGS_input.empty()) throw InvalidArgumentError("--input is empty: expected a text file");
  if (FLAGS_output.empty()) throw InvalidArgumentError("--output is empty: expected a path");
  const std::string text = ReadWholeFile(FLAGS_input);
  std::vector<uint16_t> tokens;
  if (FLAGS_input_format == "bytes") {
    tokens = BytesToTokens(text);
  } else if (FLAGS_input_format == "ids") {
    tokens = IdsToTokens(text, FLAGS_input);
  } else {
    throw InvalidArgumentError("--input_format='" + OneLine(FLAGS_input_format) +
                               "': expected 'bytes' or 'ids'");
  }
  infini::data::WriteTokenFile(FLAGS_output, tokens);
  std::cerr << "make_token_bin: wrote " << tokens.size() << " tokens to " << FLAGS_output << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv,
                       "make_token_bin --input=FILE --output=FILE.bin [--input_format=bytes|ids]",
                       "Converts text to an llm.c .bin token file.");
  if (argc > 1) {
    std::cerr << "make_token_bin: unexpected argument '" << infini::OneLine(argv[1])
              << "': expected only --flags (see --help)\n";
    return 2;
  }
  try {
    Convert();
  } catch (const infini::data::Error& error) {
    std::cerr << "make_token_bin: " << infini::OneLine(error.what()) << '\n';
    return 2;
  }
  return 0;
}
