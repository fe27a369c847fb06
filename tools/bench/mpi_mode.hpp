// MPI mode of xport-bench (`mpirun -np N xport-bench --pattern ...`): built when Meson finds
// MPI; otherwise run_mpi says so and returns kExitUnavailable.
#pragma once

#include "options.hpp"

namespace bench {

int run_mpi(const Options& opt, int argc, char** argv);

}  // namespace bench
