// A view of a store in which every key is put under "<prefix>/": how runs
// (run id) and process groups keep their keys apart.
#pragma once

#include <memory>
#include <string>

#include "infini/rendezvous/store.h"

namespace infini::rendezvous {

class PrefixStore : public Store {
 public:
  // Starts with the inner store's timeout. Throws std::invalid_argument when
  // `inner` is null.
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override;
  bool DeleteKey(const std::string& key) override;
  bool Check(const std::vector<std::string>& keys) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::Wait;
  void SetOnClose(const std::string& key, const std::string& value) override;
  void CancelOnClose(const std::string& key) override;

 private:
  std::string Prefixed(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> PrefixedAll(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace infini::rendezvous
