// ccl.h is what frameworks compile against: it must not hand them the raw
// plugin table, whose layout is the ABI version's, or a new version's table
// would break their code. infini/ccl/plugin_table.h is the internal way in.
#include <gtest/gtest.h>

#include "infini/ccl/ccl.h"

namespace {

template <typename B>
concept HandsOutThePluginTable = requires(const B& backend) {
  backend.plugin();
};

// Unqualified, so argument-dependent lookup counts: nothing ccl.h declares
// (a friend included) reaches the table.
template <typename B>
concept ReachesThePluginTable = requires(const B& backend) {
  PluginTable(backend);
};

TEST(PublicApi, CclHReachesNoPluginTable) {
  static_assert(!HandsOutThePluginTable<infini::ccl::Backend>);
  static_assert(!ReachesThePluginTable<infini::ccl::Backend>);
  SUCCEED() << "checked at compile time";
}

}  // namespace
