// infini_run's flags (flag_definitions.cc): what the parser accepts and
// --help lists.
#pragma once

#include <map>
#include <span>
#include <string>

namespace infini::launch {

// Every value flag is text: the parser checks it and names the flag, the
// value and what was expected.
struct FlagDefinition {
  const char* name;
  bool is_bool;
  const char* default_value;  // "true"/"false" for a switch
  const char* help;
};

// In the order --help lists them.
std::span<const FlagDefinition> LaunchFlags();

// The flag named `name` (underscores), or null.
const FlagDefinition* FindFlag(const std::string& name);

// torchrun's one-letter spellings: "r" -> "redirects", "t" -> "tee",
// "m" -> "module"; any other name is returned as it is.
std::string LongName(const std::string& name);

// The variable torchrun reads as the flag's default, as Kubeflow's
// PyTorchJob and TrainJob set them: PET_ and the name in upper case
// (PET_NPROC_PER_NODE).
std::string EnvironmentNameOf(const FlagDefinition& flag);

// The flag a mistyped `name` most likely meant (a few letters off, or a
// unique prefix), or empty when none is close.
std::string NearestFlagName(const std::string& name);

// The value of every flag after argv: the table's default, or torchrun's
// PET_<FLAG> from `environment` (NAME=value entries; null: none read), or
// what argv set.
class FlagValues {
 public:
  // Throws UsageError naming the variable for a switch's PET_ value that
  // is not 0, 1, true or false.
  explicit FlagValues(char* const* environment);
  void Set(const std::string& name, const std::string& value);
  const std::string& operator[](const std::string& name) const { return values_.at(name); }
  bool Bool(const std::string& name) const {
    const std::string& value = values_.at(name);
    return value == "true" || value == "1";
  }
  // `message`, a refusal, with the PET_ variable of each flag it names whose
  // value came from one.
  std::string NameSources(const std::string& message) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> from_environment_;  // flag -> PET_ variable
};

}  // namespace infini::launch
