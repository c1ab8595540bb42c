#include "infini/rendezvous/prefix_store.h"

#include <stdexcept>
#include <utility>

#include "infini/common/one_line.h"

namespace infini::rendezvous {

void Store::SetOnClose(const std::string& key, const std::string& /*value*/) {
  throw StoreError("this store has no on-close keys (the TCP store has them): cannot register '" +
                   OneLine(key) + "'");
}

void Store::CancelOnClose(const std::string& key) {
  throw StoreError("this store has no on-close keys (the TCP store has them): cannot cancel '" +
                   OneLine(key) + "'");
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (inner_ == nullptr)
    throw std::invalid_argument("PrefixStore '" + OneLine(prefix_) + "': no inner store");
  timeout_ = inner_->timeout();
}

void PrefixStore::Set(const std::string& key, const std::string& value) {
  inner_->Set(Prefixed(key), value);
}

std::string PrefixStore::Get(const std::string& key) {
  // The inner store's Get uses the inner timeout; honour ours when it differs.
  if (timeout_ != inner_->timeout()) inner_->Wait({Prefixed(key)}, timeout_);
  return inner_->Get(Prefixed(key));
}

int64_t PrefixStore::Add(const std::string& key, int64_t delta) {
  return inner_->Add(Prefixed(key), delta);
}

std::string PrefixStore::CompareSet(const std::string& key, const std::string& expected,
                                    const std::string& desired) {
  return inner_->CompareSet(Prefixed(key), expected, desired);
}

bool PrefixStore::DeleteKey(const std::string& key) { return inner_->DeleteKey(Prefixed(key)); }

bool PrefixStore::Check(const std::vector<std::string>& keys) {
  return inner_->Check(PrefixedAll(keys));
}

void PrefixStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  inner_->Wait(PrefixedAll(keys), timeout);
}

void PrefixStore::SetOnClose(const std::string& key, const std::string& value) {
  inner_->SetOnClose(Prefixed(key), value);
}

void PrefixStore::CancelOnClose(const std::string& key) { inner_->CancelOnClose(Prefixed(key)); }

std::vector<std::string> PrefixStore::PrefixedAll(const std::vector<std::string>& keys) const {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(Prefixed(key));
  return prefixed;
}

}  // namespace infini::rendezvous
