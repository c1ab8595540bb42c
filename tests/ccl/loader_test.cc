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
  EXPECT_EQ(backend->info().abi_version, 1u);
  EXPECT_EQ(backend->info().version, "mock 1.0");
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

TEST(PluginLoader, MissingEntrySymbolIsNamed) {
  const std::string text = LoadErrorText(PluginPath("mock_no_symbol"));
  EXPECT_NE(text.find("does not export the symbol 'infiniCclPlugin_v1'"), std::string::npos)
      << text;
}

TEST(PluginLoader, OlderAbiVersionIsRefusedWithBothVersions) {
  const std::string text = LoadErrorText(PluginPath("mock_old_abi"));
  EXPECT_NE(text.find("implements plugin ABI version 0, this InfiniCCL supports version 1"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, NewerAbiVersionIsRefusedWithBothVersions) {
  const std::string text = LoadErrorText(PluginPath("mock_new_abi"));
  EXPECT_NE(text.find("implements plugin ABI version 2, this InfiniCCL supports version 1"),
            std::string::npos)
      << text;
}

TEST(PluginLoader, TooSmallEntryTableIsRefused) {
  const std::string text = LoadErrorText(PluginPath("mock_small_struct"));
  EXPECT_NE(text.find("has an entry table of 64 bytes, expected at least"), std::string::npos)
      << text;
}

TEST(PluginLoader, EmptyRequiredEntryIsNamed) {
  const std::string text = LoadErrorText(PluginPath("mock_null_barrier"));
  EXPECT_NE(text.find("leaves the required entry 'barrier'"), std::string::npos) << text;
}

TEST(PluginLoader, MalformedBackendNameNamesTheVariable) {
  ::setenv("INFINI_CCL_BACKEND", "Gloo Backend!", 1);
  const std::string text = LoadErrorText("");
  ::unsetenv("INFINI_CCL_BACKEND");
  EXPECT_NE(text.find("INFINI_CCL_BACKEND='Gloo Backend!'"), std::string::npos) << text;
  EXPECT_NE(text.find("expected a backend name"), std::string::npos) << text;
}

}  // namespace
