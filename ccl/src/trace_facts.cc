// trace::Facts: a fault event's members as JSON text (trace_format.h's
// "facts"), built only while tracing is on.
#include "infini/ccl/trace.h"
#include "infini/common/json_quoted.h"

namespace infini::ccl::trace {

void Facts::Name(std::string_view name) {
  if (!members_.empty()) members_ += ',';
  members_ += JsonQuoted(name) + ":";
}

Facts& Facts::Add(std::string_view name, int64_t value) {
  Name(name);
  members_ += std::to_string(value);
  return *this;
}

Facts& Facts::Add(std::string_view name, std::string_view text) {
  Name(name);
  members_ += JsonQuoted(text);
  return *this;
}

Facts& Facts::Add(std::string_view name, const std::vector<int>& values) {
  Name(name);
  members_ += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    members_ += (i == 0 ? "" : ",") + std::to_string(values[i]);
  }
  members_ += ']';
  return *this;
}

}  // namespace infini::ccl::trace
