// The plugin's private TCP store (bootstrap.h: no bootstrap was lent) as
// gloo's store interface: the one adapter left, used only on that path.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "infini/rendezvous/store.h"

namespace infini::gloo_backend {

class PrivateStore : public ::gloo::rendezvous::Store {
 public:
  PrivateStore(std::unique_ptr<rendezvous::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->Set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    store_->Wait({key}, timeout_);
    const std::string value = store_->Get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->Wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_->Wait(keys, timeout);
  }

 private:
  std::unique_ptr<rendezvous::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace infini::gloo_backend
