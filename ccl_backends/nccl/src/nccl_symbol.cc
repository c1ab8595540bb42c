#include "nccl_symbol.h"

#include <dlfcn.h>
#include <nccl.h>

namespace infini::ccl::nccl {

void* NcclSymbol(const char* name, int version) {
  int loaded = 0;
  if (ncclGetVersion(&loaded) != ncclSuccess || loaded < version) return nullptr;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || info.dli_fname == nullptr) {
    return nullptr;
  }
  void* library = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  void* symbol = dlsym(library, name);
  dlclose(library);  // NOLOAD took one more reference; the plugin's own stays
  return symbol;
}

}  // namespace infini::ccl::nccl
