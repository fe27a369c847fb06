// The auto lane rule (plugins/nccl/lanes_rule.hpp): a lane per 4 CPUs of the process's share of
// the node, the job's processes on the node sharing its CPUs. A pure function and the launchers'
// variables: runs on any host, whatever its CPUs.
#include <cstdlib>

#include <gtest/gtest.h>

#include "lanes_rule.hpp"

namespace xport::nccl {
namespace {

TEST(LanesRule, OneProcessTakesALanePerFourCpus) {
  EXPECT_EQ(auto_lanes("tcp;ofi_rxm", 64, 64, 1, "").lanes, 16);
  EXPECT_EQ(auto_lanes("shm", 32, 32, 1, "").lanes, 8);
  EXPECT_EQ(auto_lanes("tcp;ofi_rxm", 2, 2, 1, "").lanes, 1);
  EXPECT_EQ(auto_lanes("tcp;ofi_rxm", 256, 256, 1, "").lanes, 16) << "at most 16";
}

TEST(LanesRule, ProcessesOnOneNodeShareItsCpus) {
  // 4 processes of one GPU each on 64 CPUs: 4 lanes each, 16 in all (as one process of 4 GPUs).
  LaneChoice c = auto_lanes("tcp;ofi_rxm", 64, 64, 4, "OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(c.lanes, 4);
  EXPECT_NE(c.why.find("shared by 4 processes"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("OMPI_COMM_WORLD_LOCAL_SIZE"), std::string::npos) << c.why;
  EXPECT_EQ(auto_lanes("tcp;ofi_rxm", 32, 32, 2, "LOCAL_WORLD_SIZE").lanes, 4);
  EXPECT_EQ(auto_lanes("shm", 64, 64, 8, "LOCAL_WORLD_SIZE").lanes, 2);
  EXPECT_EQ(auto_lanes("tcp;ofi_rxm", 16, 16, 64, "x").lanes, 1) << "at least 1";
}

TEST(LanesRule, AProcessBoundToItsShareIsNotDividedAgain) {
  // The launcher bound each of 4 processes to 16 of 64 CPUs: a lane per 4 of its own 16.
  LaneChoice c = auto_lanes("tcp;ofi_rxm", 16, 64, 4, "OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(c.lanes, 4);
  EXPECT_NE(c.why.find("(bound)"), std::string::npos) << c.why;
}

TEST(LanesRule, HardwareProvidersTakeOne) {
  EXPECT_EQ(auto_lanes("efa", 96, 96, 1, "").lanes, 1);
  EXPECT_EQ(auto_lanes("verbs;ofi_rxm", 64, 64, 4, "MPI_LOCALNRANKS").lanes, 1);
}

TEST(LanesRule, TheLaunchersVariablesSayHowManyProcessesShareTheNode) {
  const char* const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                               "MV2_COMM_WORLD_LOCAL_SIZE", "PALS_LOCAL_SIZE",
                               "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"};
  for (const char* n : names) unsetenv(n);
  EXPECT_EQ(local_processes().first, 1) << "no launcher: alone";
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  EXPECT_EQ(local_processes(), std::make_pair(8, std::string("LOCAL_WORLD_SIZE")));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_EQ(local_processes(), std::make_pair(4, std::string("OMPI_COMM_WORLD_LOCAL_SIZE")))
      << "the MPI launcher's count first";
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4(x2)", 1);
  EXPECT_EQ(local_processes().second, "LOCAL_WORLD_SIZE") << "not a plain count: skipped";
  setenv("LOCAL_WORLD_SIZE", "0", 1);
  EXPECT_EQ(local_processes().first, 1) << "0 is no count";
  for (const char* n : names) unsetenv(n);
}

}  // namespace
}  // namespace xport::nccl
