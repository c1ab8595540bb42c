#include "key_value_table.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "infini/common/one_line.h"

namespace infini::rendezvous {
namespace {

using wire::MessageType;
using wire::Reply;

// Timeouts are clamped to a year, so that deadline arithmetic cannot overflow.
constexpr Milliseconds kLongestTimeout = Milliseconds{365} * 24 * 3600 * 1000;

Milliseconds DeadlineAfter(Milliseconds now, int64_t timeout_ms) {
  return now + std::clamp<int64_t>(timeout_ms, 0, kLongestTimeout);
}

Reply Make(MessageType type) {
  Reply reply;
  reply.type = type;
  return reply;
}

Reply Ok() { return Make(MessageType::kOk); }

Reply Value(std::shared_ptr<const std::string> value) {
  Reply reply = Make(MessageType::kValue);
  reply.value = std::move(value);
  return reply;
}

Reply Integer(int64_t value) {
  Reply reply = Make(MessageType::kInteger);
  reply.integer = value;
  return reply;
}

Reply Bool(bool value) {
  Reply reply = Make(MessageType::kBool);
  reply.integer = value ? 1 : 0;
  return reply;
}

// A programming error of the caller: the table's contract is broken.
[[noreturn]] void ContractBroken(const char* what) {
  std::fprintf(stderr, "KeyValueTable: %s\n", what);
  std::abort();
}

}  // namespace

Reply KeyValueTable::Error(std::string text) {
  Reply reply = Make(MessageType::kError);
  reply.error = std::move(text);
  return reply;
}

bool KeyValueTable::Handle(ClientId client, const wire::Request& request, Milliseconds now) {
  if (waiters_.contains(client)) ContractBroken("a request from a client that is waiting");
  const std::string* key = request.keys.empty() ? nullptr : &request.keys.front();
  switch (request.type) {
    case MessageType::kSet:
      SetValue(*key, std::make_shared<const std::string>(request.value));
      Answer(client, Ok());
      WakeWaitersOf(*key);
      return true;
    case MessageType::kGet:
      return Get(client, *key, DeadlineAfter(now, request.number));
    case MessageType::kAdd:
      Add(client, *key, request.number);
      return true;
    case MessageType::kCompareSet:
      CompareSet(client, request);
      return true;
    case MessageType::kDelete:
      Answer(client, Bool(data_.erase(*key) > 0));
      return true;
    case MessageType::kCheck:
      Answer(client, Bool(std::all_of(request.keys.begin(), request.keys.end(),
                                      [this](const std::string& k) { return data_.contains(k); })));
      return true;
    case MessageType::kWait:
      return Wait(client, request.keys, DeadlineAfter(now, request.number));
    case MessageType::kNumKeys:
      Answer(client, Integer(static_cast<int64_t>(data_.size())));
      return true;
    default:
      Answer(client, Error("request type " + std::to_string(static_cast<int>(request.type)) +
                           " is not a key-value request"));
      return true;
  }
}

void KeyValueTable::SetValue(const std::string& key, std::shared_ptr<const std::string> value) {
  data_.insert_or_assign(key, std::move(value));
}

void KeyValueTable::Add(ClientId client, const std::string& key, int64_t delta) {
  int64_t current = 0;
  if (const auto found = data_.find(key); found != data_.end()) {
    const std::string& text = *found->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), current);
    if (error != std::errc() || end != text.data() + text.size()) {
      Answer(client, Error("cannot add to key '" + OneLine(key.substr(0, 256)) + "': its value '" +
                           OneLine(text.substr(0, 64)) + "' is not an integer"));
      return;
    }
  }
  int64_t updated = 0;
  if (__builtin_add_overflow(current, delta, &updated)) {
    Answer(client,
           Error("adding " + std::to_string(delta) + " to key '" + OneLine(key.substr(0, 256)) +
                 "' (" + std::to_string(current) + ") overflows int64"));
    return;
  }
  SetValue(key, std::make_shared<const std::string>(std::to_string(updated)));
  Answer(client, Integer(updated));
  WakeWaitersOf(key);
}

void KeyValueTable::CompareSet(ClientId client, const wire::Request& request) {
  const std::string& key = request.keys.front();
  const auto found = data_.find(key);
  const bool matches =
      found == data_.end() ? request.expected.empty() : *found->second == request.expected;
  if (!matches) {
    // c10d's answer: the current value, or `expected` for a missing key.
    Answer(client,
           Value(found == data_.end() ? std::make_shared<const std::string>(request.expected)
                                      : found->second));
    return;
  }
  auto desired = std::make_shared<const std::string>(request.value);
  SetValue(key, desired);
  Answer(client, Value(std::move(desired)));
  WakeWaitersOf(key);
}

bool KeyValueTable::Get(ClientId client, const std::string& key, Milliseconds deadline) {
  if (const auto found = data_.find(key); found != data_.end()) {
    Answer(client, Value(found->second));
    return true;
  }
  Park(client, /*is_get=*/true, {key}, deadline);
  return false;
}

bool KeyValueTable::Wait(ClientId client, const std::vector<std::string>& keys,
                         Milliseconds deadline) {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!data_.contains(key)) missing.push_back(key);
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (missing.empty()) {
    Answer(client, Ok());
    return true;
  }
  Park(client, /*is_get=*/false, std::move(missing), deadline);
  return false;
}

void KeyValueTable::Park(ClientId client, bool is_get, std::vector<std::string> missing_keys,
                         Milliseconds deadline) {
  Waiter& waiter = waiters_[client];
  waiter.is_get = is_get;
  waiter.missing_keys = missing_keys.size();
  waiter.deadline = deadline;
  waiter.registrations.reserve(missing_keys.size());
  for (std::string& key : missing_keys) {
    WaitList& list = waiters_by_key_[key];
    list.push_back({client, waiter.registrations.size()});
    waiter.registrations.push_back({std::move(key), std::prev(list.end())});
  }
  num_registrations_ += missing_keys.size();
  deadlines_.emplace(deadline, client);
}

void KeyValueTable::WakeWaitersOf(const std::string& key) {
  const auto found = waiters_by_key_.find(key);
  if (found == waiters_by_key_.end()) return;
  const WaitList woken = std::move(found->second);
  waiters_by_key_.erase(found);
  num_registrations_ -= woken.size();
  for (const WaitEntry& entry : woken) {
    Waiter& waiter = waiters_.at(entry.client);
    waiter.registrations[entry.registration].active = false;
    if (--waiter.missing_keys > 0) continue;
    const bool is_get = waiter.is_get;
    deadlines_.erase({waiter.deadline, entry.client});
    waiters_.erase(entry.client);
    Answer(entry.client, is_get ? Value(data_.at(key)) : Ok());
  }
}

void KeyValueTable::ExpireWaiters(Milliseconds now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const ClientId client = deadlines_.begin()->second;
    Unpark(client);
    Answer(client, Make(MessageType::kTimeout));
  }
}

Milliseconds KeyValueTable::NextDeadline() const {
  return deadlines_.empty() ? -1 : deadlines_.begin()->first;
}

void KeyValueTable::Unpark(ClientId client) {
  const auto found = waiters_.find(client);
  if (found == waiters_.end()) return;
  Waiter& waiter = found->second;
  for (Registration& registration : waiter.registrations) {
    if (!registration.active) continue;
    const auto list = waiters_by_key_.find(registration.key);
    list->second.erase(registration.position);
    --num_registrations_;
    if (list->second.empty()) waiters_by_key_.erase(list);
  }
  deadlines_.erase({waiter.deadline, client});
  waiters_.erase(found);
}

void KeyValueTable::Forget(ClientId client) {
  Unpark(client);
  std::erase_if(outbox_,
                [client](const Completion& completion) { return completion.client == client; });
}

}  // namespace infini::rendezvous
