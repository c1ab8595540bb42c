#include "generation.h"

#include <map>
#include <mutex>
#include <utility>

namespace infini::parallel::internal {

uint64_t NextGeneration(int global_rank, const std::string& key) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, uint64_t> generations;
  std::lock_guard<std::mutex> lock(mutex);
  return generations[{global_rank, key}]++;
}

}  // namespace infini::parallel::internal
