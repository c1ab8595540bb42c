/* Compiled as C: the ABI headers stay plain C, and a C plugin's
 * infiniCclCollectiveReduces answers what the host's table says
 * (collectives_test.cc compares them). */
#include "infini/ccl/plugin_abi.h"

int InfiniCclTestCollectiveReducesFromC(int collective) {
  return infiniCclCollectiveReduces((infiniCclCollective_t)collective);
}
