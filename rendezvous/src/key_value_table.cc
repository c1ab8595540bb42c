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

Reply ValueReply(std::shared_ptr<const std::string> value) {
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

KeyValueTable::KeyValueTable(TableLimits limits) : limits_(limits) {}

KeyValueTable::~KeyValueTable() = default;

size_t KeyValueTable::stored_bytes() const { return key_bytes_ + value_account_->bytes; }

KeyValueTable::Value KeyValueTable::MakeValue(std::string bytes) {
  value_account_->bytes += bytes.size();
  return Value(new std::string(std::move(bytes)),
               [account = value_account_](const std::string* value) {
                 account->bytes -= value->size();
                 delete value;
               });
}

bool KeyValueTable::Fits(ClientId client, const std::string& key, size_t value_bytes,
                         const char* doing) {
  size_t freed = 0;
  size_t added = value_bytes;
  if (const auto found = data_.find(key); found == data_.end()) {
    added += key.size() + kKeyOverheadBytes;
  } else if (found->second.use_count() == 1) {
    freed = found->second->size();  // not kept alive by a reply being sent
  }
  const size_t held = stored_bytes() - freed;
  if (held <= limits_.max_stored_bytes && added <= limits_.max_stored_bytes - held) return true;
  Answer(client, Error("store full: " + std::string(doing) + " key '" +
                       OneLine(key.substr(0, 256)) + "' to " + std::to_string(value_bytes) +
                       " bytes would hold " + std::to_string(held + added) +
                       " bytes of keys and values, above the store's max_stored_bytes (" +
                       std::to_string(limits_.max_stored_bytes) + "); delete keys or raise it"));
  return false;
}

bool KeyValueTable::Handle(ClientId client, wire::Request request, Milliseconds now) {
  if (waiters_.contains(client)) ContractBroken("a request from a client that is waiting");
  const std::string* key = request.keys.empty() ? nullptr : &request.keys.front();
  switch (request.type) {
    case MessageType::kSet:
      if (!Fits(client, *key, request.value.size(), "setting")) return true;
      SetValue(*key, MakeValue(std::move(request.value)));
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
      Answer(client, Bool(EraseKey(*key)));
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

void KeyValueTable::SetValue(const std::string& key, Value value) {
  const auto [entry, inserted] = data_.insert_or_assign(key, std::move(value));
  if (inserted) key_bytes_ += entry->first.size() + kKeyOverheadBytes;
}

bool KeyValueTable::EraseKey(const std::string& key) {
  const auto found = data_.find(key);
  if (found == data_.end()) return false;
  key_bytes_ -= found->first.size() + kKeyOverheadBytes;
  data_.erase(found);
  return true;
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
  std::string text = std::to_string(updated);
  if (!Fits(client, key, text.size(), "adding to")) return;
  SetValue(key, MakeValue(std::move(text)));
  Answer(client, Integer(updated));
  WakeWaitersOf(key);
}

void KeyValueTable::CompareSet(ClientId client, wire::Request& request) {
  const std::string& key = request.keys.front();
  const auto found = data_.find(key);
  const bool matches =
      found == data_.end() ? request.expected.empty() : *found->second == request.expected;
  if (!matches) {
    // c10d's answer: the current value, or `expected` for a missing key.
    Answer(client, ValueReply(found == data_.end() ? MakeValue(std::move(request.expected))
                                                   : found->second));
    return;
  }
  if (!Fits(client, key, request.value.size(), "compare-setting")) return;
  Value desired = MakeValue(std::move(request.value));
  SetValue(key, desired);
  Answer(client, ValueReply(std::move(desired)));
  WakeWaitersOf(key);
}

bool KeyValueTable::Get(ClientId client, const std::string& key, Milliseconds deadline) {
  if (const auto found = data_.find(key); found != data_.end()) {
    Answer(client, ValueReply(found->second));
    return true;
  }
  return !Park(client, /*is_get=*/true, {key}, deadline);
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
  return !Park(client, /*is_get=*/false, std::move(missing), deadline);
}

bool KeyValueTable::Park(ClientId client, bool is_get, std::vector<std::string> missing_keys,
                         Milliseconds deadline) {
  size_t cost = kWaiterOverheadBytes + missing_keys.size() * kRegistrationBytes;
  for (const std::string& key : missing_keys) {
    if (!waiters_by_key_.contains(key)) cost += key.size() + kWaitedKeyOverheadBytes;
  }
  if (waiter_bytes_ > limits_.max_waiter_bytes || cost > limits_.max_waiter_bytes - waiter_bytes_) {
    Answer(client,
           Error("waiting for " + std::to_string(missing_keys.size()) +
                 " missing key(s) would take " + std::to_string(cost) +
                 " bytes of waiter bookkeeping, and waiters hold " + std::to_string(waiter_bytes_) +
                 " of the " + std::to_string(limits_.max_waiter_bytes) +
                 " that the store's max_buffered_bytes leaves them"));
    return false;
  }
  waiter_bytes_ += kWaiterOverheadBytes + missing_keys.size() * kRegistrationBytes;
  Waiter& waiter = waiters_[client];
  waiter.is_get = is_get;
  waiter.missing_keys = missing_keys.size();
  waiter.deadline = deadline;
  waiter.registrations.reserve(missing_keys.size());
  for (std::string& key : missing_keys) {
    const auto [entry, inserted] = waiters_by_key_.try_emplace(std::move(key));
    if (inserted) waiter_bytes_ += entry->first.size() + kWaitedKeyOverheadBytes;
    WaitList& list = entry->second;
    list.push_back({client, waiter.registrations.size()});
    waiter.registrations.push_back({&*entry, std::prev(list.end())});
  }
  num_registrations_ += missing_keys.size();
  deadlines_.emplace(deadline, client);
  return true;
}

void KeyValueTable::EraseWaitedKey(WaitedKey* waited) {
  waiter_bytes_ -= waited->first.size() + kWaitedKeyOverheadBytes;
  waiters_by_key_.erase(waiters_by_key_.find(waited->first));
}

void KeyValueTable::EraseWaiter(std::unordered_map<ClientId, Waiter>::iterator waiter) {
  waiter_bytes_ -= kWaiterOverheadBytes + waiter->second.registrations.size() * kRegistrationBytes;
  deadlines_.erase({waiter->second.deadline, waiter->first});
  waiters_.erase(waiter);
}

void KeyValueTable::WakeWaitersOf(const std::string& key) {
  const auto found = waiters_by_key_.find(key);
  if (found == waiters_by_key_.end()) return;
  const WaitList woken = std::move(found->second);
  EraseWaitedKey(&*found);
  num_registrations_ -= woken.size();
  for (const WaitEntry& entry : woken) {
    const auto waiter = waiters_.find(entry.client);
    waiter->second.registrations[entry.registration].active = false;
    if (--waiter->second.missing_keys > 0) continue;
    const bool is_get = waiter->second.is_get;
    EraseWaiter(waiter);
    Answer(entry.client, is_get ? ValueReply(data_.at(key)) : Ok());
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
  for (Registration& registration : found->second.registrations) {
    if (!registration.active) continue;
    registration.waited->second.erase(registration.position);
    --num_registrations_;
    if (registration.waited->second.empty()) EraseWaitedKey(registration.waited);
  }
  EraseWaiter(found);
}

void KeyValueTable::FailWaitersOn(const std::string& key, const std::string& error) {
  const auto found = waiters_by_key_.find(key);
  if (found == waiters_by_key_.end()) return;
  std::vector<ClientId> clients;
  for (const WaitEntry& entry : found->second) clients.push_back(entry.client);
  for (ClientId client : clients) {
    Unpark(client);
    Answer(client, Error(error));
  }
}

Milliseconds KeyValueTable::LatestDeadlineOn(const std::string& key) const {
  const auto found = waiters_by_key_.find(key);
  if (found == waiters_by_key_.end()) return -1;
  Milliseconds latest = -1;
  for (const WaitEntry& entry : found->second) {
    latest = std::max(latest, waiters_.at(entry.client).deadline);
  }
  return latest;
}

void KeyValueTable::Forget(ClientId client) {
  Unpark(client);
  std::erase_if(outbox_,
                [client](const Completion& completion) { return completion.client == client; });
}

}  // namespace infini::rendezvous
