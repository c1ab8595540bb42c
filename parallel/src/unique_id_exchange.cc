#include "infini/parallel/unique_id_exchange.h"

#include "generation.h"
#include "infini/parallel/errors.h"
#include "run_store.h"

namespace infini::parallel {
namespace {

void ValidateGroupName(const std::string& group) {
  if (group.empty() || group.find('/') != std::string::npos) {
    throw ParallelUsageError("unique id exchange: group name '" + group +
                             "': expected a non-empty name without '/'");
  }
}

// Relative to the run's namespace.
std::string RelativeKey(const std::string& group, uint64_t generation) {
  return "unique_id/" + group + "/" + std::to_string(generation);
}

}  // namespace

UniqueIdExchange::UniqueIdExchange(const UniqueIdExchangeOptions& options) {
  const Environment environment = options.environment ? *options.environment : CurrentEnvironment();
  const ProcessTopology topology = ReadProcessTopology(environment);
  const RuntimeSettings settings = ReadRuntimeSettings(environment, topology);
  endpoint_ = std::make_unique<internal::RunStoreEndpoint>(
      internal::OpenRunStore(environment, topology, settings));
  timeout_ = options.timeout.value_or(settings.timeout);
  endpoint_->Connect();  // an unreachable store is reported here, not at the first group
}

UniqueIdExchange::~UniqueIdExchange() = default;

uint64_t UniqueIdExchange::NextGeneration(const std::string& group) {
  // Per process (not per exchange object): -1 stands for "this process" among
  // the global ranks that process groups count for.
  return internal::NextGeneration(-1, "unique_id/" + group);
}

std::string UniqueIdExchange::KeyOf(const std::string& group, uint64_t generation) const {
  return endpoint_->key_namespace + "/" + RelativeKey(group, generation);
}

void UniqueIdExchange::Publish(const std::string& group, const ccl::UniqueId& id) {
  ValidateGroupName(group);
  Publish(group, id, NextGeneration(group));
}

ccl::UniqueId UniqueIdExchange::Receive(const std::string& group) {
  ValidateGroupName(group);
  return Receive(group, NextGeneration(group));
}

void UniqueIdExchange::Publish(const std::string& group, const ccl::UniqueId& id,
                               uint64_t generation) {
  ValidateGroupName(group);
  endpoint_->Connect()->Set(RelativeKey(group, generation), id.ToBytes());
}

ccl::UniqueId UniqueIdExchange::Receive(const std::string& group, uint64_t generation) {
  ValidateGroupName(group);
  const std::string key = RelativeKey(group, generation);
  // A connection of its own: another thread may publish meanwhile.
  std::shared_ptr<rendezvous::Store> store = endpoint_->Connect();
  try {
    store->Wait({key}, timeout_);
  } catch (const rendezvous::StoreTimeoutError&) {
    throw ParallelError(
        "unique id exchange: group '" + group + "' (generation " + std::to_string(generation) +
        "): no id from its root within " + std::to_string(timeout_.count()) + " ms under key '" +
        KeyOf(group, generation) + "' (is the root running, and making '" + group + "' too?)");
  }
  return ccl::UniqueId::FromBytes(store->Get(key));
}

}  // namespace infini::parallel
