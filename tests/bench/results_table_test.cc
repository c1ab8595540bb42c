#include "results_table.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace infini::bench {
namespace {

TEST(NcclTestsTable, SmallBandwidthsArePlainNumbersWithTwoDecimals) {
  TableRow row;
  row.bytes = 8;
  row.count = 2;
  row.type = "float32";
  row.redop = "sum";
  row.time_us = 13.904;
  row.algbw_GBps = 0.00079139;  // Google Benchmark's console: "791.39u"
  row.busbw_GBps = 12.345;
  row.wrong = 0;
  const std::string line = FormatTableRow(row);
  EXPECT_NE(line.find(" 13.90 "), std::string::npos) << line;
  EXPECT_NE(line.find(" 0.00 "), std::string::npos) << line;
  EXPECT_NE(line.find(" 12.35 "), std::string::npos) << line;
  EXPECT_EQ(line.find("791"), std::string::npos) << line;
  row.wrong = -1;
  EXPECT_NE(FormatTableRow(row).find("N/A"), std::string::npos);
}

TEST(NcclTestsTable, TailColumnsFollowNcclTestsColumnsOrSayNotMeasured) {
  TableRow row;
  row.type = "float32";
  row.redop = "sum";
  std::string line = FormatTableRow(row);
  std::istringstream words(line);
  std::vector<std::string> fields;
  for (std::string word; words >> word;) fields.push_back(word);
  ASSERT_EQ(fields.size(), 13u) << line;
  EXPECT_EQ(fields[9], "N/A") << line;  // i_min, not measured
  row.per_iteration = ComputeIterationStats({4.0, 1.0, 2.0, 3.0});
  line = FormatTableRow(row);
  EXPECT_NE(line.find("      1.00      3.00      4.00      4.00"), std::string::npos) << line;
  const std::string header = FormatTableHeader();
  for (const char* column : {"i_min", "i_p50", "i_p99", "i_max"}) {
    EXPECT_GT(header.find(column), header.find("#wrong")) << column << ": " << header;
  }
}

TEST(NcclTestsTable, HeaderNamesNcclTestsColumns) {
  const std::string header = FormatTableHeader();
  size_t at = 0;
  for (const char* column :
       {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"}) {
    const size_t found = header.find(column, at);
    ASSERT_NE(found, std::string::npos) << column << " in order in: " << header;
    at = found;
  }
}

}  // namespace
}  // namespace infini::bench
