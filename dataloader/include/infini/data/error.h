#pragma once

#include <stdexcept>
#include <string>

namespace infini::data {

// Base of every error this library throws. Each message is one line that
// names the value or file, what was found and what was expected.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad argument: a size, rank, buffer shape or dtype the caller chose.
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// A data file that is missing, unreadable, truncated or not in the expected format.
class FileFormatError : public Error {
 public:
  using Error::Error;
};

}  // namespace infini::data
