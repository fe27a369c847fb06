// How many lanes XPORT_NCCL_LANES=0 (auto) opens: where the provider moves the bytes with the
// CPU, a lane per 4 CPUs of the process's share of the node (the job's processes on the node
// share its CPUs); 1 where a NIC moves the bytes.
#pragma once

#include <string>
#include <utility>

namespace xport::nccl {

struct LaneChoice {
  int lanes = 1;
  std::string why;  // for the INFO line of the first init
};

// `cpus`: the CPUs this process may run on; `online`: the node's; `local_processes`: the job's
// processes on this node (1: alone, or unknown), `source` the variable that said so. A process
// bound to fewer CPUs than the node has was given its share by its launcher; one that may run
// on every CPU shares them: CPUs / processes. A lane per 4 CPUs of the share, at least 1, at
// most 16.
LaneChoice auto_lanes(const std::string& provider, int cpus, int online, int local_processes,
                      const std::string& source);

// The job's processes on this node, as the launcher's environment says (Open MPI, MPICH,
// MVAPICH, Cray PALS, Slurm, torchrun), and the variable read; {1, ""} when none does.
std::pair<int, std::string> local_processes();

}  // namespace xport::nccl
