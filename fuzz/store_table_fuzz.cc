// libFuzzer harness: the key-value table's request handling.
//
// Input: a program of operations, a few bytes each (request type, client,
// keys, timeout, clock steps, clients leaving). A shadow model (a map of
// values, the set of waiting clients and their deadlines) is kept beside the
// table. Checked after every operation: answers go only to the client that
// asked or to a client that was waiting, a waiting client gets exactly one
// answer, a Get's value and NumKeys agree with the model, timeouts come only
// at or after the deadline, and the table's waiter counts agree. The table
// runs under small limits (from the program's first byte): a Set, Add or
// CompareSet refused as "store full" changes nothing, a Get or Wait refused
// for its bookkeeping does not wait, the stored bytes are exactly the
// model's keys and values, and the waiter bytes never pass their cap and are
// all given back once nobody waits.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "key_value_table.h"

namespace {

using infini::rendezvous::ClientId;
using infini::rendezvous::Completion;
using infini::rendezvous::KeyValueTable;
using infini::rendezvous::Milliseconds;
using infini::rendezvous::TableLimits;
using infini::rendezvous::wire::MessageType;
using infini::rendezvous::wire::Request;

constexpr int kClients = 6;
constexpr int kKeys = 5;

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "store_table_fuzz: %s\n", what);
  std::abort();
}

class Program {
 public:
  Program(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool Done() const { return position_ >= size_; }
  uint8_t Byte() { return position_ < size_ ? data_[position_++] : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

struct WaitingClient {
  bool is_get = false;
  std::string get_key;
  std::vector<std::string> keys;
  Milliseconds deadline = 0;
};

TableLimits LimitsFrom(uint8_t byte) {
  TableLimits limits;
  limits.max_stored_bytes = 200 + static_cast<size_t>(byte % 16) * 40;
  limits.max_waiter_bytes = 300 + static_cast<size_t>(byte / 16) * 60;
  return limits;
}

class Model {
 public:
  explicit Model(uint8_t limits) : table_(LimitsFrom(limits)) {}

  void Run(Program& program) {
    while (!program.Done()) Step(program);
  }

 private:
  static std::string Key(uint8_t byte) { return "k" + std::to_string(byte % kKeys); }

  void Step(Program& program) {
    const uint8_t op = program.Byte();
    const auto client = static_cast<ClientId>(program.Byte() % kClients);
    switch (op % 12) {
      case 10:  // time passes
        now_ += program.Byte() * 4;
        table_.ExpireWaiters(now_);
        Check(kNoRequester);
        return;
      case 11:  // a client leaves
        table_.Forget(client);
        waiting_.erase(client);
        Check(kNoRequester);
        return;
      default:
        break;
    }
    if (waiting_.contains(client))
      return;  // the server never sends a waiting client's next request
    Request request;
    request.type = static_cast<MessageType>(2 + op % 8);  // kSet .. kNumKeys
    const uint8_t key_count =
        request.type == MessageType::kCheck || request.type == MessageType::kWait
            ? program.Byte() % 4
            : (request.type == MessageType::kNumKeys ? 0 : 1);
    for (uint8_t i = 0; i < key_count; ++i) request.keys.push_back(Key(program.Byte()));
    request.value = std::string(program.Byte() % 3, 'v');
    if (program.Byte() % 4 == 0)
      request.value = std::to_string(static_cast<int8_t>(program.Byte()));
    request.expected = request.value.empty() ? "" : "v";
    request.number = static_cast<int8_t>(program.Byte()) * 8;
    Apply(client, request);
  }

  static bool Refusal(const Completion& completion, const char* naming) {
    return completion.reply.type == MessageType::kError &&
           completion.reply.error.find(naming) != std::string::npos;
  }

  void Apply(ClientId client, const Request& request) {
    const bool answered = table_.Handle(client, request, now_);
    answers_ = table_.TakeCompletions();
    // The requester's answer comes first (wake-ups it caused follow).
    const bool store_full = answered && !answers_.empty() && answers_.front().client == client &&
                            Refusal(answers_.front(), "max_stored_bytes");
    const bool too_many_waiters = answered && !answers_.empty() &&
                                  answers_.front().client == client &&
                                  Refusal(answers_.front(), "max_buffered_bytes");
    if (store_full) {
      Require(request.type == MessageType::kSet || request.type == MessageType::kAdd ||
                  request.type == MessageType::kCompareSet,
              "store full for a request that stores nothing");
      Require(answers_.size() == 1, "a refused write woke someone");
      answers_.clear();
      Check(kNoRequester);
      return;
    }
    if (too_many_waiters) {
      Require(request.type == MessageType::kGet || request.type == MessageType::kWait,
              "a waiter refusal for a request that does not wait");
      Require(table_.waiter_bytes() <= table_.limits().max_waiter_bytes, "waiters beyond the cap");
      answers_.clear();
      Check(kNoRequester);
      return;
    }
    if (!answered) {
      Require(request.type == MessageType::kGet || request.type == MessageType::kWait,
              "only Get and Wait may wait");
      WaitingClient& waiting = waiting_[client];
      waiting.is_get = request.type == MessageType::kGet;
      waiting.keys = request.keys;
      if (waiting.is_get) waiting.get_key = request.keys[0];
      waiting.deadline = now_ + std::max<int64_t>(request.number, 0);
      for (const std::string& key : request.keys) {
        if (!values_.contains(key)) continue;
        Require(!waiting.is_get, "a Get of a present key waits");
      }
    }
    const std::map<std::string, std::string> before = values_;
    Mirror(request);
    Check(client, answered, request, before);
  }

  // Updates the model's values for a request the table has handled.
  void Mirror(const Request& request) {
    const std::string* key = request.keys.empty() ? nullptr : &request.keys[0];
    switch (request.type) {
      case MessageType::kSet:
        values_[*key] = request.value;
        break;
      case MessageType::kDelete:
        values_.erase(*key);
        break;
      case MessageType::kCompareSet: {
        const auto found = values_.find(*key);
        if (found == values_.end() ? request.expected.empty() : found->second == request.expected) {
          values_[*key] = request.value;
        }
        break;
      }
      default:
        break;  // kAdd is mirrored from its answer
    }
  }

  static constexpr ClientId kNoRequester = ~ClientId{0};

  void Check(ClientId requester, bool answered = true, const Request& request = {},
             const std::map<std::string, std::string>& before = {}) {
    bool requester_answered = false;
    std::deque<Completion> completions = std::exchange(answers_, {});
    if (completions.empty()) completions = table_.TakeCompletions();
    for (const Completion& completion : completions) {
      const auto& reply = completion.reply;
      if (completion.client == requester && !requester_answered && answered) {
        requester_answered = true;
        CheckImmediate(request, reply, before);
        continue;
      }
      const auto waiting = waiting_.find(completion.client);
      Require(waiting != waiting_.end(), "an answer to a client that was not waiting");
      if (reply.type == MessageType::kTimeout) {
        Require(now_ >= waiting->second.deadline, "a timeout before the deadline");
      } else if (waiting->second.is_get) {
        Require(reply.type == MessageType::kValue && reply.value &&
                    values_.contains(waiting->second.get_key) &&
                    *reply.value == values_.at(waiting->second.get_key),
                "a woken Get's value differs from the key's");
      } else {
        Require(reply.type == MessageType::kOk, "a woken Wait's answer is not kOk");
      }
      waiting_.erase(waiting);
    }
    Require(!answered || requester == kNoRequester || requester_answered,
            "an answered request got no answer");
    Require(table_.num_waiters() == waiting_.size(), "waiter count differs from the model");
    Require(table_.num_keys() == values_.size(), "key count differs from the model");
    completions.clear();  // the replies went out: no value is kept alive by one
    size_t stored = 0;
    for (const auto& [key, value] : values_) {
      stored += key.size() + KeyValueTable::kKeyOverheadBytes + value.size();
    }
    Require(table_.stored_bytes() == stored, "stored bytes differ from the model's");
    Require(table_.stored_bytes() <= table_.limits().max_stored_bytes, "stored beyond the cap");
    Require(table_.waiter_bytes() <= table_.limits().max_waiter_bytes, "waiters beyond the cap");
    Require(!waiting_.empty() || table_.waiter_bytes() == 0, "waiter bytes kept after the waits");
    for (const auto& [client, waiting] : waiting_) {
      Require(table_.IsWaiting(client), "a waiting client is not waiting in the table");
      Require(table_.NextDeadline() <= waiting.deadline, "a deadline later than a waiter's");
    }
  }

  void CheckImmediate(const Request& request, const infini::rendezvous::wire::Reply& reply,
                      const std::map<std::string, std::string>& before) {
    switch (request.type) {
      case MessageType::kGet:
        Require(reply.type == MessageType::kValue && *reply.value == before.at(request.keys[0]),
                "Get answered another value");
        break;
      case MessageType::kNumKeys:
        Require(reply.integer == static_cast<int64_t>(before.size()), "NumKeys differs");
        break;
      case MessageType::kAdd:
        if (reply.type == MessageType::kInteger)
          values_[request.keys[0]] = std::to_string(reply.integer);
        break;
      case MessageType::kCheck: {
        bool all = true;
        for (const std::string& key : request.keys) all = all && before.contains(key);
        Require(reply.integer == (all ? 1 : 0), "Check differs");
        break;
      }
      default:
        break;
    }
  }

  KeyValueTable table_;
  std::deque<Completion> answers_;  // taken by Apply, checked by Check
  Milliseconds now_ = 0;
  std::map<std::string, std::string> values_;
  std::map<ClientId, WaitingClient> waiting_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Program program(data, size);
  Model model(program.Byte());
  model.Run(program);
  return 0;
}
