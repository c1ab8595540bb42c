// What the host does not take on a plugin's word, and the ABI pieces a
// vendor port needs: the process-wide init entry and the non-blocking
// bootstrap read.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace {

using infini::ccl::Backend;
using infini::ccl::Communicator;
using infini::ccl::Error;
using infini::ccl::LoadError;

std::string PluginPath(const std::string& name) {
  return std::string(INFINI_CCL_TEST_PLUGIN_DIR) + "/libinfini_ccl_" + name + ".so";
}

template <typename Function>
Function Hook(const std::string& plugin, const char* name) {
  void* handle = dlopen(PluginPath(plugin).c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  return reinterpret_cast<Function>(dlsym(handle, name));
}

// Sets environment variables for one test and restores them after.
class ScopedEnvironment {
 public:
  void Set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
    setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(HostChecks, CommunicatorLargerThanAskedIsRefusedNamingThePluginAndBothFigures) {
  const auto backend = Backend::Load(PluginPath("mock_liar_count"));
  try {
    Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
    FAIL() << "a communicator of 3 ranks was accepted for a request of 1";
  } catch (const Error& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("'mock'"), std::string::npos) << text;
    EXPECT_NE(text.find("libinfini_ccl_mock_liar_count.so"), std::string::npos) << text;
    EXPECT_NE(text.find("of 3 ranks"), std::string::npos) << text;
    EXPECT_NE(text.find("asked for 1 ranks"), std::string::npos) << text;
  }
}

TEST(HostChecks, CommInitRanksChecksEveryRankItGetsBack) {
  const auto backend = Backend::Load(PluginPath("mock_liar_count"));
  const std::vector<int> ranks = {0}, devices = {0};
  EXPECT_THROW(backend->CommInitRanks(1, backend->GetUniqueId(), ranks, devices), Error);
}

TEST(HostChecks, HonestPluginsCommunicatorCarriesTheAskedRankAndSize) {
  const auto backend = Backend::Load(PluginPath("mock"));
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
}

// ---- Shrink and revoke ----------------------------------------------------------

TEST(HostChecks, ShrinkOfOneRankExcludingNoneIsACopyCheckedByTheHost) {
  const auto backend = Backend::Load(PluginPath("mock"));
  ASSERT_TRUE(backend->capabilities().shrink());
  ASSERT_TRUE(backend->capabilities().revoke());
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  Communicator copy = comm.Shrink({});
  EXPECT_TRUE(copy.valid());
  EXPECT_EQ(copy.rank(), 0);
  EXPECT_EQ(copy.world_size(), 1);
  EXPECT_NO_THROW(comm.Revoke());
  EXPECT_NO_THROW(copy.Shrink({}, infini::ccl::ShrinkMode::kAbort));
  EXPECT_TRUE(comm.valid()) << "the parent stays the caller's to free";
}

TEST(HostChecks, ShrinkListsOutsideTheCommunicatorOrOfEveryRankAreRefusedBeforeThePlugin) {
  const auto backend = Backend::Load(PluginPath("mock"));
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  const auto calls = Hook<int (*)()>("mock", "mock_plugin_collective_calls");
  ASSERT_NE(calls, nullptr);
  const int before = calls();
  const auto refusal = [&](std::vector<int> excluded) -> std::string {
    try {
      comm.Shrink(excluded);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), infiniCclInvalidArgument) << error.what();
      return error.what();
    }
    return "accepted";
  };
  EXPECT_EQ(refusal({1}),
            "Shrink: excluded rank 1 is not a rank of this communicator: expected 0..0");
  EXPECT_EQ(refusal({0, 0}),
            "Shrink: the excluded ranks are all 1 ranks of this communicator: expected at least "
            "one survivor");
  EXPECT_EQ(calls(), before) << "the plugin was called for a refused list";
}

TEST(HostChecks, ShrunkCommunicatorWithAWrongRankIsRefusedAndFreed) {
  const auto backend = Backend::Load(PluginPath("mock_liar_shrink"));
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  const auto destroyed = Hook<int (*)()>("mock_liar_shrink", "mock_plugin_destroy_calls");
  ASSERT_NE(destroyed, nullptr);
  const int before = destroyed();
  try {
    comm.Shrink({});
    FAIL() << "a shrunk communicator with rank 7 of 1 was accepted";
  } catch (const Error& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("comm_shrink made a communicator of 1 ranks with this rank as 7, asked "
                        "for 1 ranks with this rank as 0"),
              std::string::npos)
        << text;
  }
  EXPECT_EQ(destroyed(), before + 1) << "the refused communicator was not freed";
  EXPECT_TRUE(comm.valid());
}

TEST(HostChecks, ShrinkAndRevokeBeyondAnOlderTablesSizeAreNotImplemented) {
  for (const char* plugin : {"mock_pre_shrink", "mock_v1"}) {
    SCOPED_TRACE(plugin);
    const auto backend = Backend::Load(PluginPath(plugin));
    EXPECT_FALSE(backend->capabilities().shrink());
    EXPECT_FALSE(backend->capabilities().revoke());
    Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
    try {
      comm.Shrink({});
      FAIL() << "Shrink reached a plugin without comm_shrink";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), infiniCclUnsupported);
      EXPECT_NE(std::string(error.what()).find("does not implement comm_shrink"), std::string::npos)
          << error.what();
    }
    try {
      comm.Revoke();
      FAIL() << "Revoke reached a plugin without comm_revoke";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("does not implement comm_revoke"), std::string::npos)
          << error.what();
    }
  }
}

// Register: refused before the plugin is called where it has no entry, and
// for no buffer or no bytes.
TEST(HostChecks, RegisterWithoutTheEntryOrWithoutABufferIsRefused) {
  const auto backend = Backend::Load(PluginPath("mock_pre_shrink"));
  EXPECT_FALSE(backend->capabilities().register_buffers());
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  infini::ccl::DeviceBuffer buffer(backend, 64);
  try {
    comm.Register(buffer.data(), buffer.bytes());
    FAIL() << "Register reached a plugin without comm_register";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclUnsupported);
    EXPECT_NE(std::string(error.what()).find("does not implement comm_register"), std::string::npos)
        << error.what();
  }
  try {
    comm.Register(nullptr, 64);
    FAIL() << "a null buffer was registered";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("got no buffer"), std::string::npos) << error.what();
  }
}

TEST(HostChecks, CommInitRankInsideAGroupIsMadeAtTheOutermostGroupEnd) {
  const auto backend = Backend::Load(PluginPath("mock"));
  backend->GroupStart();
  backend->GroupStart();
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  EXPECT_FALSE(comm.valid()) << "made before the group ended";
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  backend->GroupEnd();
  EXPECT_FALSE(comm.valid()) << "made at an inner GroupEnd";
  backend->GroupEnd();
  EXPECT_TRUE(comm.valid());
  comm.Destroy();
  EXPECT_FALSE(comm.valid());
}

TEST(HostChecks, AGroupedInitOfALiarFailsAtGroupEndAndLeavesNoCommunicator) {
  const auto backend = Backend::Load(PluginPath("mock_liar_count"));
  backend->GroupStart();
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  try {
    backend->GroupEnd();
    FAIL() << "GroupEnd accepted a communicator larger than asked";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("of 3 ranks"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(comm.valid());
}

TEST(HostChecks, AGroupedInitWhoseCommunicatorIsDroppedEarlyIsFreedAtGroupEnd) {
  const auto backend = Backend::Load(PluginPath("mock"));
  backend->GroupStart();
  { Communicator dropped = backend->CommInitRank(1, backend->GetUniqueId(), 0); }
  EXPECT_NO_THROW(backend->GroupEnd());
}

// A framework written for NCCL wraps its inits in GroupStart/GroupEnd; on a
// plugin without group entries the host keeps the group: the init waits for
// GroupEnd, a collective runs at once, and only point-to-point is refused.
TEST(HostChecks, APluginWithoutGroupEntriesStillGroups) {
  const auto backend = Backend::Load(PluginPath("mock_no_group"));
  ASSERT_FALSE(backend->capabilities().group());
  backend->GroupStart();
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  EXPECT_FALSE(comm.valid()) << "made before the group ended";
  backend->GroupEnd();
  ASSERT_TRUE(comm.valid());
  float value = 1;
  backend->GroupStart();
  EXPECT_NO_THROW(
      comm.AllReduce(&value, &value, 1, infini::ccl::dtype::kFloat32, infini::ccl::ReduceOp::kSum));
  try {
    comm.Send(&value, 1, infini::ccl::dtype::kFloat32, 0);
    ADD_FAILURE() << "a Send inside a host-kept group was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclUnsupported);
    const std::string text = error.what();
    EXPECT_NE(text.find("Send inside GroupStart/GroupEnd: backend 'mock' has no group entries"),
              std::string::npos)
        << text;
  }
  backend->GroupEnd();
  EXPECT_NO_THROW(comm.Send(&value, 1, infini::ccl::dtype::kFloat32, 0));
}

TEST(HostChecks, GroupEndWithoutGroupStartIsAUsageError) {
  const auto backend = Backend::Load(PluginPath("mock"));
  try {
    backend->GroupEnd();
    FAIL() << "an unmatched GroupEnd was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidUsage);
  }
}

// ---- The init entry ---------------------------------------------------------

TEST(PluginInit, RunsOnceAtLoadWithThisBackendsOptionsAndThePlacement) {
  ScopedEnvironment environment;
  environment.Set("INFINI_CCL_VENDOR_OPTIONS", "mock:from_env=1;nccl:max_ctas=4");
  environment.Set("GLOBAL_PROC_RANK", "3");
  environment.Set("PROC_WORLD_SIZE", "8");
  environment.Set("LOCAL_PROC_RANK", "1");
  environment.Set("NPROC_PER_NODE", "2");
  const std::vector<infini::ccl::VendorOption> options = {{"mock", "threads", "2"},
                                                          {"gloo", "socket_ifname", "lo"}};
  Backend::Load(PluginPath("mock_init"), options);
  Backend::Load(PluginPath("mock_init"), options);
  const auto calls = Hook<int (*)()>("mock_init", "mock_plugin_init_calls");
  const auto seen = Hook<const char* (*)()>("mock_init", "mock_plugin_init_options");
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(calls(), 1);
  EXPECT_STREQ(seen(), "threads=2;from_env=1;|3,8,1,2");
}

TEST(PluginInit, ARefusedInitRefusesThePluginWithItsText) {
  const std::vector<infini::ccl::VendorOption> options = {{"mock", "refuse", "yes"}};
  try {
    Backend::Load(PluginPath("mock_init_refused"), options);
    FAIL() << "a plugin whose init failed was loaded";
  } catch (const LoadError& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("libinfini_ccl_mock_init_refused.so"), std::string::npos) << text;
    EXPECT_NE(text.find("mock: init refused (option refuse)"), std::string::npos) << text;
  }
}

TEST(PluginInit, MalformedOptionsVariableIsOneLineNamingIt) {
  ScopedEnvironment environment;
  environment.Set("INFINI_CCL_VENDOR_OPTIONS", "mock:ok=1;no_colon_here\n");
  try {
    Backend::Load(PluginPath("mock_init_refused"));
    FAIL() << "a malformed INFINI_CCL_VENDOR_OPTIONS was accepted";
  } catch (const LoadError& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("INFINI_CCL_VENDOR_OPTIONS"), std::string::npos) << text;
    EXPECT_NE(text.find("'no_colon_here\\n'"), std::string::npos) << text;
    EXPECT_NE(text.find("BACKEND:KEY=VALUE"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

// ---- The bootstrap's non-blocking read --------------------------------------

// A store whose Get with a zero timeout is the only way to ask: the default
// TryGet must turn its timeout into "absent".
class WaitingStore : public infini::ccl::BootstrapStore {
 public:
  void Set(const std::string& key, const std::string& value) override { values_[key] = value; }
  std::string Get(const std::string& key, std::chrono::milliseconds) override {
    auto found = values_.find(key);
    if (found == values_.end()) throw Error(infiniCclTimeout, "no '" + key + "' yet");
    return found->second;
  }
  int64_t Add(const std::string&, int64_t) override { return 0; }
  void Wait(const std::vector<std::string>&, std::chrono::milliseconds) override {}

 private:
  std::map<std::string, std::string> values_;
};

TEST(BootstrapTryGet, AbsentKeyIsNotFoundAtOncePresentKeyIsItsValue) {
  WaitingStore store;
  EXPECT_EQ(store.TryGet("k"), std::nullopt);
  store.Set("k", "value");
  EXPECT_EQ(store.TryGet("k"), std::optional<std::string>("value"));
}

}  // namespace

namespace {

// what() is one line whatever the message holds (a user's value, a
// plugin's text): the promise every caller that prints it relies on.
TEST(ErrorText, ControlCharactersAreEscapedSoWhatIsOneLine) {
  const infini::ccl::Error error(infiniCclInvalidArgument, "value 'a\nb\tc'");
  EXPECT_STREQ(error.what(), "value 'a\\nb\\tc'");
  const infini::ccl::LoadError load("backend '\x07'");
  EXPECT_STREQ(load.what(), "backend '\\x07'");
}

TEST(ErrorText, MalformedBackendNameWithANewlineIsOneLine) {
  try {
    Backend::Load("gl\noo");
    FAIL() << "a backend name with a newline was accepted";
  } catch (const LoadError& error) {
    EXPECT_NE(std::string(error.what()).find("--ccl_backend='gl\\noo'"), std::string::npos)
        << error.what();
  }
}

}  // namespace
