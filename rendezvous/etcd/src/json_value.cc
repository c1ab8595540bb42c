#include "json_value.h"

#include <cstdlib>

namespace infini::rendezvous::etcd {

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : text_(text) {}

  JsonValue ParseDocument() {
    JsonValue value = ParseValue(0);
    SkipSpace();
    if (position_ != text_.size()) Fail("trailing characters");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void Fail(const std::string& what) const {
    throw JsonError("malformed JSON at offset " + std::to_string(position_) + ": " + what);
  }
  void SkipSpace() {
    while (position_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[position_]))) {
      ++position_;
    }
  }
  char Peek() {
    SkipSpace();
    if (position_ >= text_.size()) Fail("unexpected end");
    return text_[position_];
  }
  void Expect(char c) {
    if (Peek() != c) Fail(std::string("expected '") + c + "'");
    ++position_;
  }

  JsonValue ParseValue(int depth) {
    if (depth > kMaxDepth) Fail("nested too deeply");
    JsonValue value;
    const char c = Peek();
    if (c == '{') {
      value.kind_ = JsonValue::Kind::kObject;
      ++position_;
      if (Peek() == '}') {
        ++position_;
        return value;
      }
      while (true) {
        std::string name = ParseString();
        Expect(':');
        value.members_[name] = ParseValue(depth + 1);
        if (Peek() == ',') {
          ++position_;
          continue;
        }
        Expect('}');
        return value;
      }
    }
    if (c == '[') {
      value.kind_ = JsonValue::Kind::kArray;
      ++position_;
      if (Peek() == ']') {
        ++position_;
        return value;
      }
      while (true) {
        value.items_.push_back(ParseValue(depth + 1));
        if (Peek() == ',') {
          ++position_;
          continue;
        }
        Expect(']');
        return value;
      }
    }
    if (c == '"') {
      value.kind_ = JsonValue::Kind::kScalar;
      value.text_ = ParseString();
      return value;
    }
    const size_t start = position_;
    while (position_ < text_.size() &&
           std::string_view(",}] \t\r\n").find(text_[position_]) == std::string_view::npos) {
      ++position_;
    }
    value.text_ = text_.substr(start, position_ - start);
    if (value.text_ == "null") {
      value.text_.clear();
      return value;
    }
    if (value.text_.empty()) Fail("expected a value");
    value.kind_ = JsonValue::Kind::kScalar;
    return value;
  }

  std::string ParseString() {
    Expect('"');
    std::string out;
    while (true) {
      if (position_ >= text_.size()) Fail("unterminated string");
      char c = text_[position_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (position_ >= text_.size()) Fail("unterminated escape");
      c = text_[position_++];
      switch (c) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (position_ + 4 > text_.size()) Fail("short \\u escape");
          const unsigned long code = std::strtoul(text_.substr(position_, 4).c_str(), nullptr, 16);
          position_ += 4;
          // The gateway escapes only ASCII ('<', '>', '&'); others as UTF-8.
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default:
          out += c;  // '"', '\\', '/'
      }
    }
  }

  const std::string& text_;
  size_t position_ = 0;
};

JsonValue JsonValue::Parse(const std::string& text) { return JsonParser(text).ParseDocument(); }

const JsonValue& JsonValue::operator[](const std::string& name) const {
  static const JsonValue kAbsent;
  auto found = members_.find(name);
  return found == members_.end() ? kAbsent : found->second;
}

long long JsonValue::AsInt(long long fallback) const {
  if (kind_ != Kind::kScalar || text_.empty()) return fallback;
  return std::strtoll(text_.c_str(), nullptr, 10);
}

std::string JsonQuote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace infini::rendezvous::etcd
