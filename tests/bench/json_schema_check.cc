#include "json_schema_check.h"

#include <fstream>
#include <sstream>

namespace infini::bench::testing {
namespace {

std::string TypeName(const Json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number()) return "number";
  return value.type_name();  // null, boolean, string, array, object
}

bool HasType(const Json& value, const std::string& type) {
  const std::string actual = TypeName(value);
  return actual == type || (type == "number" && actual == "integer");
}

// A member of `object`; null when absent or when `object` is no object.
const Json* Member(const Json& object, const std::string& name) {
  if (!object.is_object()) return nullptr;
  const auto found = object.find(name);
  return found == object.end() ? nullptr : &*found;
}

void Check(const Json& root, const Json& schema, const Json& value, const std::string& path,
           std::vector<std::string>* violations) {
  // "$ref": "#/definitions/NAME", the only form the schema uses.
  if (const Json* ref = Member(schema, "$ref")) {
    const std::string prefix = "#/definitions/";
    const std::string name = ref->is_string() ? ref->get<std::string>() : "";
    const Json* definitions = Member(root, "definitions");
    const Json* target = definitions == nullptr || name.rfind(prefix, 0) != 0
                             ? nullptr
                             : Member(*definitions, name.substr(prefix.size()));
    if (target == nullptr) {
      violations->push_back(path + ": the schema's $ref " + name + " is not defined");
      return;
    }
    return Check(root, *target, value, path, violations);
  }
  if (const Json* type = Member(schema, "type")) {
    std::vector<std::string> allowed;
    if (type->is_string()) allowed.push_back(type->get<std::string>());
    if (type->is_array()) {
      for (const Json& item : *type) allowed.push_back(item.get<std::string>());
    }
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
  if (const Json* choices = Member(schema, "enum")) {
    bool fits = false;
    for (const Json& choice : *choices) fits = fits || choice == value;
    if (!fits) violations->push_back(path + ": not one of the enum's values");
  }
  if (const Json* minimum = Member(schema, "minimum");
      minimum != nullptr && value.is_number() && value.get<double>() < minimum->get<double>()) {
    violations->push_back(path + ": below the minimum");
  }
  if (value.is_object()) {
    if (const Json* required = Member(schema, "required")) {
      for (const Json& name : *required) {
        if (!value.contains(name.get<std::string>())) {
          violations->push_back(path + ": no \"" + name.get<std::string>() + "\"");
        }
      }
    }
    if (const Json* properties = Member(schema, "properties")) {
      for (const auto& [name, property] : properties->items()) {
        if (const Json* member = Member(value, name)) {
          Check(root, property, *member, path + "." + name, violations);
        }
      }
    }
  }
  if (value.is_array()) {
    if (const Json* items = Member(schema, "items")) {
      for (size_t index = 0; index < value.size(); ++index) {
        Check(root, *items, value[index], path + "[" + std::to_string(index) + "]", violations);
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
