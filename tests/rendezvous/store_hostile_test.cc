// The server against clients that are many, slow, greedy or strangers: it
// stays up, stays small, serves everyone else, and gives a stranger nothing.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "infini/rendezvous/run_token.h"
#include "infini/rendezvous/tcp_store.h"
#include "raw_store_socket.h"
#include "store_test_util.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::ElapsedSince;
using testing::ErrorFrameText;
using testing::Eventually;
using testing::RawStoreSocket;
using wire::FrameWriter;
using wire::MessageType;

constexpr char kToken[] = "0123456789abcdef-the-run-token";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::unique_ptr<TcpStoreServer> StartServer(TcpStoreServerOptions options = {}) {
  options.host = "127.0.0.1";
  return TcpStoreServer::Start(options);
}

// This process's resident memory in KiB (VmRSS of /proc/self/status).
long ResidentKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// Raises the soft limit on open files to the hard one; returns the limit.
size_t RaiseOpenFileLimit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return static_cast<size_t>(limit.rlim_cur);
}

std::string Hello() { return testing::HelloFrame(); }

// ---- wake-ups ----

// Runs `body` in a child process forked now (while this process has one
// thread); the child exits when `body` returns and the parent closes the
// pipe returned. Reaped by ~ChildProcess.
class ChildProcess {
 public:
  template <typename Body>
  explicit ChildProcess(Body body) {
    int to_child[2];
    int from_child[2];
    EXPECT_EQ(::pipe(to_child), 0);
    EXPECT_EQ(::pipe(from_child), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      body(to_child[0], from_child[1]);
      char byte;
      while (::read(to_child[0], &byte, 1) > 0) {
      }
      ::_exit(0);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
  }
  ~ChildProcess() {
    if (to_child_ >= 0) ::close(to_child_);
    ::close(from_child_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  int to_child() const { return to_child_; }
  // Tells the child to finish (it sees end of file).
  void CloseToChild() {
    ::close(to_child_);
    to_child_ = -1;
  }
  int from_child() const { return from_child_; }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

bool WriteAll(int fd, const void* bytes, size_t count) {
  return ::write(fd, bytes, count) == static_cast<ssize_t>(count);
}

// Reads `count` bytes within `timeout` (false on EOF or timeout).
bool ReadAll(int fd, void* bytes, size_t count, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto* next = static_cast<char*>(bytes);
  while (count > 0) {
    pollfd descriptor{.fd = fd, .events = POLLIN, .revents = 0};
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (::poll(&descriptor, 1, 50) <= 0) continue;
    const ssize_t got = ::read(fd, next, count);
    if (got <= 0) return false;
    next += got;
    count -= static_cast<size_t>(got);
  }
  return true;
}

std::string ChainKey(uint32_t link) { return "chain/" + std::to_string(link); }

// Waiter i waits for key i and then sets key i+1: when key 0 is set, every
// wake-up causes the next. The old server woke them recursively and died of a
// stack overflow at about 9,000. Under a sanitizer a fifth: the depth is
// proven by the main suite; the sanitizer looks at the wake-ups' memory and
// threads, which a shorter chain takes through the same code.
TEST(TcpStoreHostileTest, AChainOf20000WaitersEachWakingTheNextDoesNotCrashTheServer) {
#ifdef INFINI_STORE_TEST_SANITIZED
  constexpr size_t kChain = 4000;
#else
  constexpr size_t kChain = 20000;
#endif
  // The clients live in a child process, so each side has the whole limit.
  const size_t fd_limit = RaiseOpenFileLimit();
  const auto chain = static_cast<uint32_t>(std::min<size_t>(kChain, fd_limit - 256));
  ChildProcess clients([chain](int from_parent, int to_parent) {
    RaiseOpenFileLimit();
    uint16_t port = 0;
    if (!ReadAll(from_parent, &port, sizeof(port), milliseconds(30000))) return;
    std::vector<std::unique_ptr<RawStoreSocket>> sockets;
    uint32_t sent = 0;
    for (uint32_t i = 0; i < chain; ++i) {
      auto socket = std::make_unique<RawStoreSocket>(port);
      if (!socket->connected() ||
          !socket->Send(Hello() +
                        FrameWriter(MessageType::kGet).Str(ChainKey(i)).I64(120000).Finish() +
                        FrameWriter(MessageType::kSet).Str(ChainKey(i + 1)).Str("x").Finish())) {
        break;
      }
      sockets.push_back(std::move(socket));
      ++sent;
    }
    WriteAll(to_parent, &sent, sizeof(sent));
    char byte;
    while (::read(from_parent, &byte, 1) > 0) {  // keep the sockets until the parent is done
    }
  });
  TcpStoreServerOptions options;
  auto server = StartServer(options);
  const uint16_t port = server->port();
  ASSERT_TRUE(WriteAll(clients.to_child(), &port, sizeof(port)));
  uint32_t connected = 0;
  ASSERT_TRUE(ReadAll(clients.from_child(), &connected, sizeof(connected), milliseconds(45000)));
  ASSERT_EQ(connected, chain) << "the client process could not open every connection";
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == chain; }, milliseconds(45000)))
      << server->num_waiters() << " of " << chain << " waiting";
  auto trigger = ConnectTo(*server, milliseconds(60000));
  const auto start = std::chrono::steady_clock::now();
  trigger->Set(ChainKey(0), "go");
  EXPECT_EQ(trigger->Get(ChainKey(chain)), "x");
  const auto elapsed = ElapsedSince(start);
  EXPECT_EQ(server->num_waiters(), 0u);
  std::printf("[ figures ] waiter chain of %u connections: woken in %lld ms\n", chain,
              static_cast<long long>(elapsed.count()));
}

// ---- memory ----

// Strangers announce 64 MiB frames without a hello, and clients that passed
// the hello announce 64 MiB requests and send a little of them: the server
// charges its budget with the requests it admitted (three of 64 MiB fit in
// 256 MiB; the others wait, unread), and holds what arrived, never what was
// announced.
TEST(TcpStoreHostileTest, AFloodOfAnnouncedGiantFramesCostsTheServerLittleMemory) {
  TcpStoreServerOptions options;
  options.token = kToken;
  auto server = StartServer(options);
  auto bystander = TcpStoreClient::Connect("127.0.0.1", server->port(), milliseconds(5000), kToken);
  bystander->Set("k", "v");
  const long before_kib = ResidentKib();
  const std::string giant_header("\x00\x00\x00\x04", 4);  // 64 MiB
  constexpr int kStrangers = 64;
  constexpr int kGreedy = 16;
  constexpr size_t kSentPerGreedy = size_t{256} << 10;
  std::vector<std::unique_ptr<RawStoreSocket>> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    strangers.push_back(std::make_unique<RawStoreSocket>(server->port()));
    strangers.back()->Send(giant_header + std::string(1000, 'x'));
  }
  std::vector<std::unique_ptr<RawStoreSocket>> greedy;
  for (int i = 0; i < kGreedy; ++i) {
    greedy.push_back(std::make_unique<RawStoreSocket>(server->port()));
    ASSERT_TRUE(greedy.back()->Greet(kToken));
    // A Set whose body claims 64 MiB, of which 256 KiB arrive.
    greedy.back()->Send(giant_header + std::string(1, static_cast<char>(MessageType::kSet)) +
                        std::string(kSentPerGreedy, 'y'));
  }
  for (auto& stranger : strangers) {
    const std::string reply = stranger->ReadUntilClosed();
    EXPECT_TRUE(stranger->closed());
    EXPECT_TRUE(Contains(ErrorFrameText(reply), "before the hello was accepted"))
        << ErrorFrameText(reply);
  }
  constexpr size_t kAdmitted = 3;
  ASSERT_TRUE(Eventually(
      [&] {
        return server->charged_bytes() >= kAdmitted * (size_t{64} << 20) &&
               server->buffered_bytes() >= kAdmitted * kSentPerGreedy;
      },
      milliseconds(10000)))
      << server->charged_bytes() << " charged, " << server->buffered_bytes() << " buffered";
  const long growth_kib = ResidentKib() - before_kib;
  std::printf(
      "[ figures ] %d strangers + %d clients announcing 64 MiB each: server RSS +%ld KiB, "
      "buffered %zu KiB, charged %zu MiB\n",
      kStrangers, kGreedy, growth_kib, server->buffered_bytes() >> 10,
      server->charged_bytes() >> 20);
  EXPECT_LT(growth_kib, 64 * 1024);
  EXPECT_EQ(server->num_refused_hellos(), static_cast<size_t>(kStrangers));
  EXPECT_EQ(bystander->Get("k"), "v");
}

TEST(TcpStoreHostileTest, AWaitOnAMillionKeysIsRefusedAndOnlyThatConnectionCloses) {
  auto server = StartServer();
  auto bystander = ConnectTo(*server);
  bystander->Set("k", "v");
  constexpr uint32_t kKeys = 1'000'000;
  FrameWriter wait(MessageType::kWait);
  wait.U32(kKeys);
  for (uint32_t i = 0; i < kKeys; ++i) wait.Str("k" + std::to_string(i));
  const std::string frame = wait.I64(60000).Finish();  // 11 MB, made before measuring
  RawStoreSocket greedy(server->port());
  ASSERT_TRUE(greedy.Greet());
  const long before_kib = ResidentKib();
  const auto start = std::chrono::steady_clock::now();
  greedy.Send(frame);
  const std::string reply = greedy.ReadUntilClosed(milliseconds(20000));
  EXPECT_TRUE(greedy.closed());
  EXPECT_TRUE(Contains(ErrorFrameText(reply), "1000000 keys in one request"))
      << ErrorFrameText(reply);
  EXPECT_TRUE(Contains(ErrorFrameText(reply), "max_keys_per_request is 65536"));
  const long growth_kib = ResidentKib() - before_kib;
  std::printf("[ figures ] Wait on %u keys refused after %lld ms; server RSS +%ld KiB\n", kKeys,
              static_cast<long long>(ElapsedSince(start).count()), growth_kib);
  EXPECT_LT(growth_kib, 64 * 1024);
  EXPECT_EQ(server->num_waiters(), 0u);
  EXPECT_EQ(bystander->Get("k"), "v");
  // The client refuses such a Wait itself, keeping its connection.
  std::vector<std::string> keys(70000, "k");
  try {
    bystander->Wait(keys, milliseconds(100));
    FAIL() << "a Wait on 70000 keys was sent";
  } catch (const StoreError& error) {
    EXPECT_TRUE(Contains(error.what(), "max_keys_per_request is 65536")) << error.what();
  }
  EXPECT_EQ(bystander->Get("k"), "v");
}

TEST(TcpStoreHostileTest, AnOversizedRequestIsRefusedAndOnlyThatConnectionCloses) {
  TcpStoreServerOptions options;
  options.max_message_bytes = 4096;
  options.max_buffered_bytes = 1 << 20;
  auto server = StartServer(options);
  auto bystander = ConnectTo(*server, milliseconds(10000));
  auto waiting = std::async(std::launch::async, [&] { return bystander->Get("later"); });
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 1; }));
  RawStoreSocket greedy(server->port());
  ASSERT_TRUE(greedy.Greet());
  greedy.Send(FrameWriter(MessageType::kSet).Str("big").Str(std::string(8192, 'x')).Finish());
  const std::string reply = greedy.ReadUntilClosed();
  EXPECT_TRUE(greedy.closed());
  EXPECT_TRUE(Contains(ErrorFrameText(reply), "max_message_bytes is 4096"))
      << ErrorFrameText(reply);
  EXPECT_EQ(server->num_keys(), 0u);
  ConnectTo(*server)->Set("later", "served");
  EXPECT_EQ(waiting.get(), "served");
}

// ---- slow clients and timeouts ----

// A client that pipelines requests for a large value and never reads the
// replies: the server stops serving it once its replies pile up, and everyone
// else is served as usual.
TEST(TcpStoreHostileTest, AClientThatNeverReadsItsRepliesStallsNobodyElse) {
  auto server = StartServer();
  auto other = ConnectTo(*server, milliseconds(10000));
  other->Set("big", std::string(size_t{1} << 20, 'b'));
  RawStoreSocket slow(server->port());
  ASSERT_TRUE(slow.Greet());
  std::string requests;
  for (int i = 0; i < 500; ++i)
    requests += FrameWriter(MessageType::kGet).Str("big").I64(0).Finish();
  ASSERT_TRUE(slow.Send(requests));
  ASSERT_TRUE(Eventually([&] { return server->buffered_bytes() > (size_t{4} << 20); }));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) {
    other->Set("n", std::to_string(i));
    ASSERT_EQ(other->Get("n"), std::to_string(i));
  }
  EXPECT_LT(ElapsedSince(start), milliseconds(20000));  // a hang, not speed
  // 500 MiB of replies were asked for; the server holds a few MiB of them.
  EXPECT_LT(server->buffered_bytes(), size_t{16} << 20);
  std::printf("[ figures ] slow reader: server holds %zu KiB of 500 MiB asked for\n",
              server->buffered_bytes() >> 10);
}

// A client pipelines Gets of a large value and resets its connection as the
// replies start to arrive: the server's next write fails (EPIPE). It raised
// SIGPIPE on the store's thread, and its default action killed the process
// that hosts the store (here the test; in a run, the launcher).
TEST(TcpStoreHostileTest, AClientThatResetsWhileItsRepliesAreWrittenDoesNotKillTheStore) {
  auto server = StartServer();
  auto other = ConnectTo(*server, milliseconds(10000));
  other->Set("big", std::string(size_t{256} << 10, 'b'));
  for (int round = 0; round < 5; ++round) {
    RawStoreSocket leaving(server->port());
    ASSERT_TRUE(leaving.Greet());
    std::string requests;
    for (int i = 0; i < 64; ++i)
      requests += FrameWriter(MessageType::kGet).Str("big").I64(0).Finish();
    ASSERT_TRUE(leaving.Send(requests));
    ASSERT_FALSE(leaving.ReadFrame().empty());  // replies are being written
    linger reset{.l_onoff = 1, .l_linger = 0};
    ::setsockopt(leaving.fd(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  }  // each closes with unread replies: a reset
  ASSERT_TRUE(Eventually([&] { return server->num_connections() == 1; }, milliseconds(5000)));
  EXPECT_EQ(other->Get("big").size(), size_t{256} << 10);
}

TEST(TcpStoreHostileTest, AConnectionThatNeverCompletesItsHelloIsClosedByTheHelloTimeout) {
  TcpStoreServerOptions options;
  options.token = kToken;
  options.hello_timeout = milliseconds(300);
  auto server = StartServer(options);
  const auto start = std::chrono::steady_clock::now();
  RawStoreSocket silent(server->port());
  RawStoreSocket unproven(server->port());
  unproven.Send(Hello());  // gets a challenge and never answers it
  silent.ReadUntilClosed(milliseconds(5000));
  unproven.ReadUntilClosed(milliseconds(5000));
  EXPECT_TRUE(silent.closed());
  EXPECT_TRUE(unproven.closed());
  EXPECT_GE(ElapsedSince(start), milliseconds(250));
  EXPECT_TRUE(Eventually([&] { return server->num_connections() == 0; }));
}

TEST(TcpStoreHostileTest, AnIdleClientIsClosedAndReconnectsOnItsNextCall) {
  TcpStoreServerOptions options;
  options.idle_timeout = milliseconds(300);
  auto server = StartServer(options);
  auto client = ConnectTo(*server);
  client->Set("k", "v");
  ASSERT_TRUE(Eventually([&] { return server->num_connections() == 0; }, milliseconds(5000)));
  EXPECT_EQ(client->Get("k"), "v");
  // A waiting request is not idleness: it ends by its own timeout.
  client->set_timeout(milliseconds(1000));
  EXPECT_THROW(client->Get("missing"), StoreTimeoutError);
  EXPECT_EQ(client->Get("k"), "v");
}

// ---- the run token ----

class TcpStoreTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TcpStoreServerOptions options;
    options.token = kToken;
    server_ = StartServer(options);
    owner_ = TcpStoreClient::Connect("127.0.0.1", server_->port(), milliseconds(5000), kToken);
    owner_->Set("secret", "the-unique-id");
    endpoint_ = "127.0.0.1:" + std::to_string(server_->port());
  }

  // Connect with `token` must fail at once with the run token's message.
  std::string RefusedConnect(const std::string& token) {
    const auto start = std::chrono::steady_clock::now();
    try {
      TcpStoreClient::Connect("127.0.0.1", server_->port(), milliseconds(5000), token);
      ADD_FAILURE() << "a client with token '" << token << "' got in";
    } catch (const StoreError& error) {
      EXPECT_LT(ElapsedSince(start), milliseconds(2000)) << "refusal must not be retried";
      return error.what();
    }
    return "";
  }

  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStoreClient> owner_;
  std::string endpoint_;
};

TEST_F(TcpStoreTokenTest, AClientWithoutTheTokenIsRefusedWithOneClearError) {
  const std::string message = RefusedConnect("");
  EXPECT_TRUE(Contains(message, "store at " + endpoint_ + " refused the run token")) << message;
  EXPECT_TRUE(Contains(message, "set INFINI_RUN_TOKEN")) << message;
  EXPECT_TRUE(Eventually([&] { return server_->num_refused_hellos() == 1; }));
}

TEST_F(TcpStoreTokenTest, AClientWithAWrongTokenIsRefusedWithOneClearError) {
  const std::string message = RefusedConnect("not-the-token");
  EXPECT_TRUE(Contains(message, "store at " + endpoint_ + " does not hold this client's run token"))
      << message;
  EXPECT_TRUE(Contains(message, "does not match")) << message;
  EXPECT_TRUE(Contains(message, "INFINI_RUN_TOKEN")) << message;
  EXPECT_TRUE(Eventually([&] { return server_->num_connections() == 1; }));  // the owner's
}

// A stranger who pipelines requests behind its hello reads nothing and
// writes nothing: its connection ends at the failed proof.
TEST_F(TcpStoreTokenTest, AStrangerLearnsNothingAndChangesNothing) {
  RawStoreSocket stranger(server_->port());
  stranger.Send(Hello() + FrameWriter(MessageType::kGet).Str("secret").I64(0).Finish() +
                FrameWriter(MessageType::kSet).Str("secret").Str("forged").Finish() +
                FrameWriter(MessageType::kSet).Str("planted").Str("1").Finish());
  const std::string received = stranger.ReadUntilClosed();
  EXPECT_TRUE(stranger.closed());
  EXPECT_FALSE(Contains(received, "the-unique-id"));
  EXPECT_EQ(owner_->Get("secret"), "the-unique-id");
  EXPECT_FALSE(owner_->Check({"planted"}));
  EXPECT_EQ(server_->num_keys(), 1u);
}

TEST_F(TcpStoreTokenTest, TheTokenIsNeverSentInClear) {
  RawStoreSocket listener_side(server_->port());
  listener_side.Send(Hello());
  const std::string challenge = listener_side.ReadFrame();
  ASSERT_FALSE(challenge.empty());
  ASSERT_EQ(static_cast<MessageType>(challenge[0]), MessageType::kChallenge);
  wire::BodyReader reader(challenge);
  uint8_t type = 0;
  std::string server_nonce;
  std::string server_proof;
  reader.U8(&type);
  reader.Str(&server_nonce);
  reader.Str(&server_proof);
  EXPECT_FALSE(Contains(challenge, kToken));
  // The server proves the token for this client's nonce; a client's proof
  // for the same nonces is a different MAC (no reflection).
  EXPECT_TRUE(auth::ProofMatches(auth::Side::kServer, kToken, testing::kTestClientNonce,
                                 server_nonce, server_proof));
  const std::string proof =
      auth::ProofFor(auth::Side::kClient, kToken, testing::kTestClientNonce, server_nonce);
  EXPECT_NE(proof, server_proof);
  EXPECT_FALSE(Contains(proof, kToken));
  EXPECT_EQ(proof.size(), wire::kProofBytes);
  // A proof is bound to its challenge: another connection's nonce differs.
  RawStoreSocket second(server_->port());
  second.Send(Hello());
  const std::string other_challenge = second.ReadFrame();
  EXPECT_NE(other_challenge, challenge);
  second.Send(FrameWriter(MessageType::kProof).Str(proof).Finish());  // replayed proof
  const std::string refusal = second.ReadUntilClosed();
  EXPECT_TRUE(Contains(ErrorFrameText(refusal), "does not match")) << ErrorFrameText(refusal);
  EXPECT_TRUE(second.closed());
}

TEST_F(TcpStoreTokenTest, TheRightTokenWorks) {
  auto client = TcpStoreClient::Connect("127.0.0.1", server_->port(), milliseconds(5000), kToken);
  EXPECT_EQ(client->Get("secret"), "the-unique-id");
  client->Set("mine", "1");
  EXPECT_TRUE(owner_->Check({"mine"}));
}

// A client that holds a token trusts only a store that proves it: one that
// asks for no token (something else took the port) is refused at once.
TEST(TcpStoreTokenlessTest, AClientWithATokenRefusesAServerThatDoesNotAskForIt) {
  auto server = StartServer();
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStoreClient::Connect("127.0.0.1", server->port(), milliseconds(5000), kToken);
    ADD_FAILURE() << "a client with a token trusted a tokenless server";
  } catch (const StoreHandshakeError& error) {
    const std::string message = error.what();
    EXPECT_TRUE(Contains(message, "does not ask for the run token")) << message;
    EXPECT_TRUE(Contains(message, "INFINI_RUN_TOKEN")) << message;
  }
  EXPECT_LT(ElapsedSince(start), milliseconds(2000)) << "the refusal must not be retried";
}

TEST(RunTokenTest, NewTokensAre64HexDigitsAndDiffer) {
  const std::string first = NewRunToken();
  const std::string second = NewRunToken();
  EXPECT_EQ(first.size(), 64u);
  EXPECT_EQ(first.find_first_not_of("0123456789abcdef"), std::string::npos) << first;
  EXPECT_NE(first, second);
}

TEST(RunTokenTest, TheEnvironmentTokenIsEmptyWhenUnset) {
  ::unsetenv("INFINI_RUN_TOKEN");
  EXPECT_EQ(RunTokenFromEnvironment(), "");
  ::setenv("INFINI_RUN_TOKEN", "abc", 1);
  EXPECT_EQ(RunTokenFromEnvironment(), "abc");
  ::unsetenv("INFINI_RUN_TOKEN");
}

// A store short of descriptors says so, naming the limit, before clients are
// turned away (a store in a process whose soft limit is 64).
TEST(TcpStoreLimitsTest, AStoreNearItsOpenFileLimitNamesIt) {
  ChildProcess store_process([](int from_parent, int to_parent) {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &limit);
    ::dup2(to_parent, STDERR_FILENO);
    auto server = TcpStoreServer::Start({});
    const std::string port = std::to_string(server->port()) + "\n";
    (void)!::write(to_parent, port.data(), port.size());
    char byte;
    while (::read(from_parent, &byte, 1) > 0) {
    }
  });
  std::string port_line;
  char byte;
  while (::read(store_process.from_child(), &byte, 1) == 1 && byte != '\n') port_line += byte;
  ASSERT_FALSE(port_line.empty());
  const auto port = static_cast<uint16_t>(std::stoi(port_line));
  std::vector<std::unique_ptr<RawStoreSocket>> clients;
  for (int i = 0; i < 64; ++i) clients.push_back(std::make_unique<RawStoreSocket>(port));
  // Every client says hello and waits for the answer: the store has accepted
  // all it could by then.
  for (auto& client : clients) {
    client->Send(Hello());
    (void)client->ReadFrame(milliseconds(200));
  }
  store_process.CloseToChild();
  std::string said;
  char buffer[4096];
  for (ssize_t count; (count = ::read(store_process.from_child(), buffer, sizeof(buffer))) > 0;) {
    said.append(buffer, static_cast<size_t>(count));
  }
  EXPECT_TRUE(Contains(said, "open-file soft limit 64")) << said;
  EXPECT_TRUE(Contains(said, "ulimit -n")) << said;
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << "once, not per client: " << said;
}

TEST(TcpStoreBindTest, TheDefaultHostIsLoopback) {
  EXPECT_EQ(TcpStoreServerOptions{}.host, "127.0.0.1");
}

}  // namespace
}  // namespace infini::rendezvous
