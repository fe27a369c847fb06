// Stands in for mpi_mode.cc in builds without MPI: the option exists, the mode does not.
#include <cstdio>

#include "mpi_mode.hpp"

namespace bench {

int run_mpi(const Options&, int, char**) {
  std::fprintf(stderr,
               "xport-bench: --pattern (MPI mode) is not available: this xport-bench was "
               "built without MPI (install Open MPI, e.g. libopenmpi-dev, and reconfigure)\n");
  return kExitUnavailable;
}

}  // namespace bench
