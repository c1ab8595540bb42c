// The loader's failures are what a vendor meets first when porting: each one
// must say what was tried and why it failed.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "infini/ccl/ccl.h"

namespace {

namespace fs = std::filesystem;
using infini::ccl::Backend;
using infini::ccl::LoadError;

std::string PluginPath(const std::string& name) {
  return std::string(INFINI_CCL_TEST_PLUGIN_DIR) + "/libinfini_ccl_" + name + ".so";
}

std::string LoadErrorText(const std::string& spec) {
  try {
    Backend::Load(spec);
  } catch (const LoadError& error) {
    return error.what();
  }
  ADD_FAILURE() << "loading '" << spec << "' did not fail";
  return {};
}

TEST(PluginLoader, LoadsPluginByPathAndReportsWhatItIs) {
  const auto backend = Backend::Load(PluginPath("mock"));
  EXPECT_EQ(backend->info().name, "mock");
  EXPECT_EQ(backend->info().abi_version, 2u);
  EXPECT_EQ(backend->info().version, "mock 1.0");
  EXPECT_EQ(backend->info().unique_id_bytes, 4108u);
  EXPECT_EQ(backend->info().visible_devices_env, "MOCK_VISIBLE_DEVICES");
  EXPECT_EQ(backend->info().device_kind, "CPU");
  EXPECT_EQ(fs::path(backend->info().library_path), fs::canonical(PluginPath("mock")));
  EXPECT_EQ(backend->DeviceCount(), 1);
}

TEST(PluginLoader, LoadsOncePerProcess) {
  EXPECT_EQ(Backend::Load(PluginPath("mock")).get(), Backend::Load(PluginPath("mock")).get());
}

TEST(PluginLoader, FindsPluginByNameInPluginPath) {
  ::setenv("INFINI_CCL_PLUGIN_PATH", "/nonexistent-dir:" INFINI_CCL_TEST_PLUGIN_DIR, 1);
  const auto backend = Backend::Load("mock");
  ::unsetenv("INFINI_CCL_PLUGIN_PATH");
  EXPECT_EQ(backend->info().name, "mock");
  // The same file by path is the same backend object.
  EXPECT_EQ(backend.get(), Backend::Load(PluginPath("mock")).get());
}

TEST(PluginLoader, NotFoundNamesEveryPlaceSearched) {
  ::setenv("INFINI_CCL_PLUGIN_PATH", "/nonexistent-dir-a:/nonexistent-dir-b", 1);
  const std::string text = LoadErrorText("nosuchvendor");
  ::unsetenv("INFINI_CCL_PLUGIN_PATH");
  EXPECT_NE(text.find("backend 'nosuchvendor' not found"), std::string::npos) << text;
  EXPECT_NE(text.find("libinfini_ccl_nosuchvendor.so"), std::string::npos) << text;
  EXPECT_NE(text.find("/nonexistent-dir-a"), std::string::npos) << text;
  EXPECT_NE(text.find("/nonexistent-dir-b"), std::string::npos) << text;
  EXPECT_NE(text.find("system library path"), std::string::npos) << text;
  EXPECT_NE(text.find("INFINI_CCL_PLUGIN_PATH"), std::string::npos) << text;
}

TEST(PluginLoader, UnloadableFileReportsDlerror) {
  const fs::path directory =
      fs::temp_directory_path() / ("ccl_loader_test_" + std::to_string(getpid()));
  fs::create_directories(directory);
  const fs::path garbage = directory / "libinfini_ccl_garbage.so";
  {
    std::ofstream file(garbage);
    for (int line = 0; line < 64; ++line) file << "this is not an ELF file\n";
  }
  const std::string text = LoadErrorText(garbage.string());
  fs::remove_all(directory);
  EXPECT_NE(text.find("cannot load backend plugin " + garbage.string()), std::string::npos) << text;
  EXPECT_NE(text.find("invalid ELF header"), std::string::npos) << text;
}

TEST(PluginLoader, VersionOnePluginLoadsThroughTheAdapter) {
  const auto backend = Backend::Load(PluginPath("mock_v1"));
  EXPECT_EQ(backend->info().name, "mock_v1");
  EXPECT_EQ(backend->info().abi_version, 1u);
  EXPECT_EQ(backend->info().unique_id_bytes, 128u);
  // What v1 promised, and the entries it has, become capabilities.
  const auto& capabilities = backend->capabilities();
  EXPECT_TRUE(capabilities.concurrent_init());
  EXPECT_TRUE(capabilities.split());
  EXPECT_TRUE(capabilities.group());
  EXPECT_FALSE(capabilities.Implements(infini::ccl::Collective::kAllToAll));
  EXPECT_FALSE(capabilities.Implements(infini::ccl::Collective::kAllToAllV));
  // A v1 communicator is made through the trampolines: id, config, rank.
  const auto id = backend->GetUniqueId();
  ASSERT_EQ(id.size(), 128u);
  EXPECT_EQ(id.bytes()[0], 7);
  auto comm = backend->CommInitRank(1, id, 0);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  std::string message = "unchanged";
  EXPECT_EQ(comm.GetAsyncError(&message), infiniCclSuccess);
  EXPECT_EQ(message, "");  // v1 has no text
}

TEST(PluginLoader, TableFromANewerHeaderLoads) {
  const auto backend = Backend::Load(PluginPath("mock_newer_header"));
  EXPECT_EQ(backend->info().abi_version, 2u);
  auto comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  EXPECT_TRUE(comm.valid());
}

TEST(PluginLoader, MissingEntrySymbolIsNamed) {
  const std::string text = LoadErrorText(PluginPath("mock_no_symbol"));
  EXPECT_NE(text.find("exports neither 'infiniCclPlugin_v2' nor 'infiniCclPlugin_v1'"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, OnlyANewerVersionIsRefusedNamingBoth) {
  const std::string text = LoadErrorText(PluginPath("mock_v3_only"));
  EXPECT_NE(text.find("exports only 'infiniCclPlugin_v3' (plugin ABI version 3); this InfiniCCL "
                      "supports versions 1 and 2"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, TableWhoseVersionDisagreesWithItsSymbolIsRefused) {
  std::string text = LoadErrorText(PluginPath("mock_wrong_version"));
  EXPECT_NE(text.find("exports 'infiniCclPlugin_v2' with abi_version 3, expected 2"),
            std::string::npos)
      << text;
  text = LoadErrorText(PluginPath("mock_v1_wrong_version"));
  EXPECT_NE(text.find("exports 'infiniCclPlugin_v1' with abi_version 2, expected 1"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, TooSmallEntryTableIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_small_struct"));
  EXPECT_NE(text.find("has an entry table of 64 bytes, expected at least"), std::string::npos)
      << text;
  EXPECT_NE(text.find("for ABI version 2"), std::string::npos) << text;
}

TEST(PluginLoader, RegisterWithoutDeregisterIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_half_register"));
  EXPECT_NE(text.find("has comm_register without comm_deregister: expected both or neither"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, HostRegisterWithoutHostUnregisterIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_half_host_register"));
  EXPECT_NE(text.find("sets only some of the entries host_register, host_unregister: expected all "
                      "of them or none"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, HostFlagsWithoutHostFlagDestroyAreRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_half_host_flag"));
  EXPECT_NE(text.find("sets only some of the entries host_flag_create, host_flag_destroy, "
                      "stream_wait_host_flag: expected all of them or none"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, AHostFlagWriteWithoutHostFlagsIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_lone_host_flag_write"));
  EXPECT_NE(text.find("has stream_write_host_flag without host_flag_create, host_flag_destroy and "
                      "stream_wait_host_flag: expected those three with it"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, WindowRegisterWithoutWindowDeregisterIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_half_window"));
  EXPECT_NE(text.find("has comm_window_register without comm_window_deregister: expected both or "
                      "neither"),
            std::string::npos)
      << text;
}

// A feature the host acts on needs its entry: refused at load, naming both,
// not at the first abort of a hung communicator.
TEST(PluginLoader, DeclaredFeatureWithoutItsEntryIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_abort_unblocks_without_abort"));
  EXPECT_NE(text.find("declares INFINI_CCL_FEATURE_ABORT_UNBLOCKS but leaves its entry "
                      "'comm_abort' empty"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
}

TEST(PluginLoader, ConcurrentInitWithOneRankPerProcessIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_concurrent_one_rank"));
  EXPECT_NE(text.find("declares both INFINI_CCL_FEATURE_CONCURRENT_INIT"), std::string::npos)
      << text;
  EXPECT_NE(text.find("INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS"), std::string::npos) << text;
}

TEST(PluginLoader, EmptyRequiredEntryIsNamed) {
  std::string text = LoadErrorText(PluginPath("mock_null_all_reduce"));
  EXPECT_NE(text.find("leaves the required entry 'all_reduce' of its ABI version 2 table empty"),
            std::string::npos)
      << text;
  text = LoadErrorText(PluginPath("mock_v1_null_barrier"));
  EXPECT_NE(text.find("leaves the required entry 'barrier' of its ABI version 1 table empty"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, MalformedBackendNameNamesTheVariable) {
  ::setenv("INFINI_CCL_BACKEND", "Gloo Backend!", 1);
  const std::string text = LoadErrorText("");
  ::unsetenv("INFINI_CCL_BACKEND");
  EXPECT_NE(text.find("INFINI_CCL_BACKEND='Gloo Backend!'"), std::string::npos) << text;
  EXPECT_NE(text.find("expected a backend name"), std::string::npos) << text;
}

}  // namespace
