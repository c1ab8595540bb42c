#include "json_schema_check.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace infini::bench::testing {
namespace {

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
