// The auto lane rule (lanes_rule.hpp). Why the node's processes share its CPUs: nccl-tests'
// alltoall with 4 processes of one GPU each on a 64-CPU host, 1 MiB, against NET/Socket: with
// 16 lanes apiece (64 in all) 0.12-0.46 x in 10 of 13 rounds (4.6 ms an iteration where 0.2 is
// usual; handing the CPU over after idle passes did not help); 8 apiece 0.54 and 1.13 x in 2 of
// 7; 4 apiece (16 in all, as one process driving the 4 GPUs has) 2.0-2.7 x in every round
// (docs/benchmarks.md, "NCCL plugin").
#include "lanes_rule.hpp"

#include <algorithm>
#include <cstdlib>

namespace xport::nccl {

LaneChoice auto_lanes(const std::string& provider, int cpus, int online, int local_processes,
                      const std::string& source) {
  const std::string core = provider.substr(0, provider.find(';'));
  const bool software = core == "tcp" || core == "net" || core == "shm" || core == "sockets" ||
                        core == "udp";
  LaneChoice out;
  if (!software) {
    out.why = "auto: " + provider + " offloads the data";
    return out;
  }
  cpus = std::max(cpus, 1);
  const bool bound = online > cpus;  // the launcher gave this process its share already
  const int procs = std::max(local_processes, 1);
  const int share = bound || procs == 1 ? cpus : cpus / procs;
  out.lanes = std::clamp(share / 4, 1, 16);
  out.why = "auto: " + provider + " moves bytes with the CPU, " + std::to_string(cpus) + " CPUs";
  if (bound) {
    out.why += " of " + std::to_string(online) + " (bound)";
  } else if (procs > 1) {
    out.why += " shared by " + std::to_string(procs) + " processes on the node (" + source + ")";
  }
  return out;
}

std::pair<int, std::string> local_processes() {
  static const char* const kVariables[] = {
      "OMPI_COMM_WORLD_LOCAL_SIZE",  // Open MPI
      "MPI_LOCALNRANKS",             // MPICH (Hydra)
      "MV2_COMM_WORLD_LOCAL_SIZE",   // MVAPICH
      "PALS_LOCAL_SIZE",             // Cray PALS
      "SLURM_NTASKS_PER_NODE",       // Slurm (srun --ntasks-per-node)
      "LOCAL_WORLD_SIZE",            // torchrun
  };
  for (const char* name : kVariables) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == nullptr || *end != '\0' || n < 1 || n > 65536) continue;  // not a plain count
    return {static_cast<int>(n), name};
  }
  return {1, ""};
}

}  // namespace xport::nccl
