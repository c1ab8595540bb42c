#include "json_reader.h"

#include <cctype>
#include <stdexcept>

namespace infini::bench {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Json Document() {
    Json value = Value();
    Skip();
    if (at_ != text_.size()) Fail("text after the document");
    return value;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw std::runtime_error("JSON at offset " + std::to_string(at_) + ": " + what);
  }
  void Skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool Take(char c) {
    Skip();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Take(c)) Fail(std::string("expected '") + c + "'");
  }
  bool Word(const std::string& word) {
    if (text_.compare(at_, word.size(), word) != 0) return false;
    at_ += word.size();
    return true;
  }
  std::string String() {
    Expect('"');
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c == '\\') {
        if (at_ >= text_.size()) Fail("unterminated escape");
        c = text_[at_++];
        switch (c) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case 'b':
            c = '\b';
            break;
          case 'f':
            c = '\f';
            break;
          case 'u':
            if (at_ + 4 > text_.size()) Fail("short \\u escape");
            c = static_cast<char>(std::stoi(text_.substr(at_, 4), nullptr, 16));
            at_ += 4;
            break;
          default:
            break;  // '"', '\\', '/'
        }
      }
      out += c;
    }
    Expect('"');
    return out;
  }
  Json Value() {
    Skip();
    Json value;
    if (at_ >= text_.size()) Fail("unexpected end");
    const char c = text_[at_];
    if (c == '{') {
      ++at_;
      value.type = Json::Type::kObject;
      if (Take('}')) return value;
      do {
        Skip();
        const std::string name = String();
        Expect(':');
        value.members[name] = Value();
      } while (Take(','));
      Expect('}');
    } else if (c == '[') {
      ++at_;
      value.type = Json::Type::kArray;
      if (Take(']')) return value;
      do {
        value.items.push_back(Value());
      } while (Take(','));
      Expect(']');
    } else if (c == '"') {
      value.type = Json::Type::kString;
      value.string = String();
    } else if (Word("true") || Word("false")) {
      value.type = Json::Type::kBoolean;
      value.boolean = text_[at_ - 1] == 'e' && text_[at_ - 2] == 'u';
    } else if (Word("null")) {
      value.type = Json::Type::kNull;
    } else {
      const size_t begin = at_;
      while (at_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[at_])) ||
                                    std::string("+-.eE").find(text_[at_]) != std::string::npos)) {
        ++at_;
      }
      if (begin == at_) Fail("unexpected character");
      const std::string number = text_.substr(begin, at_ - begin);
      value.type = Json::Type::kNumber;
      value.number = std::stod(number);
      value.integral = number.find_first_of(".eE") == std::string::npos;
    }
    return value;
  }

  const std::string& text_;
  size_t at_ = 0;
};

}  // namespace

const Json* Json::Find(const std::string& name) const {
  const auto found = members.find(name);
  return found == members.end() ? nullptr : &found->second;
}

Json ParseJson(const std::string& text) { return Parser(text).Document(); }

}  // namespace infini::bench
