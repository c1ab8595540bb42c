#include "json_schema_check.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace infini::bench::testing {
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

std::string TypeName(const Json& value) {
  switch (value.type) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kBoolean:
      return "boolean";
    case Json::Type::kNumber:
      return value.integral ? "integer" : "number";
    case Json::Type::kString:
      return "string";
    case Json::Type::kArray:
      return "array";
    case Json::Type::kObject:
      return "object";
  }
  return "?";
}

bool HasType(const Json& value, const std::string& type) {
  const std::string actual = TypeName(value);
  return actual == type || (type == "number" && actual == "integer");
}

void Check(const Json& root, const Json& schema, const Json& value, const std::string& path,
           std::vector<std::string>* violations) {
  // "$ref": "#/definitions/NAME", the only form the schema uses.
  if (const Json* ref = schema.Find("$ref")) {
    const std::string prefix = "#/definitions/";
    const Json* definitions = root.Find("definitions");
    const Json* target = definitions == nullptr || ref->string.rfind(prefix, 0) != 0
                             ? nullptr
                             : definitions->Find(ref->string.substr(prefix.size()));
    if (target == nullptr) {
      violations->push_back(path + ": the schema's $ref " + ref->string + " is not defined");
      return;
    }
    return Check(root, *target, value, path, violations);
  }
  if (const Json* type = schema.Find("type")) {
    std::vector<std::string> allowed;
    if (type->type == Json::Type::kString) allowed.push_back(type->string);
    for (const Json& item : type->items) allowed.push_back(item.string);
    bool fits = false;
    std::string names;
    for (const std::string& name : allowed) {
      fits = fits || HasType(value, name);
      names += (names.empty() ? "" : " or ") + name;
    }
    if (!fits) {
      violations->push_back(path + ": expected " + names + ", got " + TypeName(value));
      return;
    }
  }
  if (const Json* choices = schema.Find("enum")) {
    bool fits = false;
    for (const Json& choice : choices->items) {
      fits = fits || (choice.type == value.type && choice.string == value.string &&
                      choice.number == value.number && choice.boolean == value.boolean);
    }
    if (!fits) violations->push_back(path + ": not one of the enum's values");
  }
  if (const Json* minimum = schema.Find("minimum");
      minimum != nullptr && value.type == Json::Type::kNumber && value.number < minimum->number) {
    violations->push_back(path + ": below the minimum");
  }
  if (value.type == Json::Type::kObject) {
    if (const Json* required = schema.Find("required")) {
      for (const Json& name : required->items) {
        if (value.Find(name.string) == nullptr) {
          violations->push_back(path + ": no \"" + name.string + "\"");
        }
      }
    }
    if (const Json* properties = schema.Find("properties")) {
      for (const auto& [name, property] : properties->members) {
        if (const Json* member = value.Find(name)) {
          Check(root, property, *member, path + "." + name, violations);
        }
      }
    }
  }
  if (value.type == Json::Type::kArray) {
    if (const Json* items = schema.Find("items")) {
      for (size_t index = 0; index < value.items.size(); ++index) {
        Check(root, *items, value.items[index], path + "[" + std::to_string(index) + "]",
              violations);
      }
    }
  }
}

}  // namespace

const Json* Json::Find(const std::string& name) const {
  const auto found = members.find(name);
  return found == members.end() ? nullptr : &found->second;
}

Json ParseJson(const std::string& text) { return Parser(text).Document(); }

std::vector<std::string> SchemaViolations(const Json& schema, const Json& document) {
  std::vector<std::string> violations;
  Check(schema, schema, document, "$", &violations);
  return violations;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace infini::bench::testing
