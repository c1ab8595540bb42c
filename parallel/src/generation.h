// Internal: how often this process made a group of one key, so that a group
// made twice never reads the first one's keys. Process groups
// (group_creation.cc) and UniqueIdExchange both count here.
#pragma once

#include <cstdint>
#include <string>

namespace infini::parallel::internal {

// Next generation of group `key` made by global rank `global_rank` in this
// process: 0, 1, 2, ... Members make groups in the same order, so their
// counts agree, and a group made twice never reads the first one's id.
uint64_t NextGeneration(int global_rank, const std::string& key);

}  // namespace infini::parallel::internal
