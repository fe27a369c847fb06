// stat_op_name() (xport/stats.hpp): the names of the operation kinds Stats counts per rail.
#include "fabric/counters.hpp"
#include "xport/stats.hpp"

namespace xport {

const char* stat_op_name(int op) {
  return fabric::op_name(static_cast<fabric::OpKind>(op));
}

}  // namespace xport
