// Schedulers for real: ranks started directly by mpirun (Open MPI) and by
// Slurm's srun run the collective check without infini_run (parallel/ reads
// OMPI_COMM_WORLD_* and SLURM_*); srun starting one infini_run per node; the
// sbatch script of docs/schedulers.md. Slurm runs here as a one-node cluster:
// slurmctld and slurmd started by the test with a minimal slurm.conf in a
// temporary folder (auth/none: the daemons listen on loopback only). Tests skip,
// naming the package, where openmpi-bin or slurm-wlm is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/unused_port.h"
#include "host_process.h"

namespace {

using infini::hosts_testing::ChildProcess;
using infini::hosts_testing::ExitReport;
using infini::hosts_testing::NoProcessLeft;
using infini::hosts_testing::RunCommand;
using infini::hosts_testing::TempDir;
using infini::hosts_testing::TestMark;
using namespace std::chrono_literals;

const std::string kBinDir = INFINI_HOSTS_BIN_DIR;
const std::string kScriptsDir = INFINI_HOSTS_SCRIPTS_DIR;

bool InPath(const std::string& program) {
  return RunCommand({"sh", "-c", "command -v " + program}, 10s) == 0;
}

std::string PortText() { return std::to_string(infini::testing::UnusedPortBelowEphemeralRange()); }

// Every rank of a world of `world_size` printed its "OK" line.
void ExpectEveryRankPassed(const std::string& output, int world_size) {
  for (int rank = 0; rank < world_size; ++rank) {
    EXPECT_NE(output.find("rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " "),
              std::string::npos)
        << "rank " << rank << " did not report:\n"
        << output;
  }
  EXPECT_EQ(output.find("error"), std::string::npos) << output;
}

TEST(Mpirun, StartsRanksThatRunTheCollectiveCheckWithoutInfiniRun) {
  if (!InPath("mpirun")) {
    GTEST_SKIP() << "mpirun test skipped: mpirun not found (apt-get install openmpi-bin; "
                    "scripts/dev.sh test installs it)";
  }
  TempDir scratch;
  // Two processes of two threads; rank 0 hosts the store at MASTER_ADDR:MASTER_PORT.
  ChildProcess run({"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
                    "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + PortText(), "-x",
                    "INFINI_RUN_TOKEN", "-x", "HOSTS_TEST_MARK", kBinDir + "/parallel_check",
                    "--ccl_backend=gloo", "--threads_per_process=2"},
                   {"INFINI_RUN_TOKEN=" + std::string(64, 'b')}, scratch.path() + "/out");
  const ExitReport report = run.Wait(120s);
  ASSERT_TRUE(report.exited) << run.Output();
  EXPECT_EQ(report.exit_code, 0) << run.Output();
  ExpectEveryRankPassed(run.Output(), 4);
  // The ranks took their places from Open MPI's variables.
  EXPECT_NE(run.Output().find("process 1 local 1"), std::string::npos) << run.Output();
  EXPECT_TRUE(NoProcessLeft());
}

// A one-node Slurm cluster for the suite.
class Slurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!InPath("slurmctld") || !InPath("slurmd") || !InPath("srun")) {
      skip_reason_ = new std::string(
          "Slurm test skipped: slurmctld, slurmd or srun not found (apt-get install slurm-wlm; "
          "scripts/dev.sh test installs it)");
      return;
    }
    cluster_ = new Cluster();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_TRUE(cluster_->ready) << cluster_->Logs();
  }

  // slurmctld and slurmd in the foreground (children of this test), their
  // configuration, state and logs in one temporary folder.
  struct Cluster {
    TempDir folder;
    std::string conf = folder.path() + "/slurm.conf";
    std::unique_ptr<ChildProcess> controller;
    std::unique_ptr<ChildProcess> node;
    bool ready = false;

    Cluster() {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      const std::string dir = folder.path();
      const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
      infini::hosts_testing::WriteFile(
          conf,
          "ClusterName=iccltest\nSlurmctldHost=" + std::string(host) +
              "(127.0.0.1)\nSlurmctldPort=" + PortText() + "\nSlurmdPort=" + PortText() +
              "\nAuthType=auth/none\nCredType=cred/none\nProctrackType=proctrack/pgid\n"
              "TaskPlugin=task/none\nSelectType=select/cons_tres\n"
              "SelectTypeParameters=CR_CPU\nSlurmUser=root\nSlurmdUser=root\n"
              "StateSaveLocation=" +
              dir + "\nSlurmdSpoolDir=" + dir + "/spool\n" + "SlurmctldPidFile=" + dir +
              "/slurmctld.pid\nSlurmdPidFile=" + dir + "/slurmd.pid\nSlurmctldLogFile=" + dir +
              "/slurmctld.log\nSlurmdLogFile=" + dir +
              "/slurmd.log\nReturnToService=2\nMpiDefault=none\n"
              "JobAcctGatherType=jobacct_gather/none\n"
              "AccountingStorageType=accounting_storage/none\nSwitchType=switch/none\n"
              "NodeName=" +
              host + " NodeAddr=127.0.0.1 CPUs=" + std::to_string(cpus) +
              " State=UNKNOWN\nPartitionName=test Nodes=" + host +
              " Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n",
          0644);
      const std::vector<std::string> daemon_env = {"SLURM_CONF=" + conf,
                                                   "HOSTS_TEST_MARK=slurm-daemons"};
      controller = std::make_unique<ChildProcess>(
          std::vector<std::string>{"slurmctld", "-D", "-i", "-f", conf}, daemon_env,
          dir + "/slurmctld.out");
      node = std::make_unique<ChildProcess>(std::vector<std::string>{"slurmd", "-D", "-f", conf},
                                            daemon_env, dir + "/slurmd.out");
      ready = WaitUntilIdle(60s);
    }

    bool WaitUntilIdle(std::chrono::seconds bound) const {
      const auto deadline = std::chrono::steady_clock::now() + bound;
      while (std::chrono::steady_clock::now() < deadline) {
        std::string state;
        if (RunCommand({"env", "SLURM_CONF=" + conf, "sinfo", "-h", "-o", "%T"}, 10s, &state) ==
                0 &&
            state.find("idle") != std::string::npos) {
          return true;
        }
        std::this_thread::sleep_for(200ms);
      }
      return false;
    }

    std::string Logs() const {
      return "slurmctld:\n" + controller->Output() + "\nslurmd:\n" + node->Output();
    }
  };

  // A Slurm command (srun, sbatch) against the test's cluster.
  static std::unique_ptr<ChildProcess> Submit(std::vector<std::string> argv,
                                              const std::string& output) {
    return std::make_unique<ChildProcess>(
        argv, std::vector<std::string>{"SLURM_CONF=" + cluster_->conf}, output);
  }

  static Cluster* cluster_;
  static std::string* skip_reason_;
  TempDir scratch_;
};

Slurm::Cluster* Slurm::cluster_ = nullptr;
std::string* Slurm::skip_reason_ = nullptr;

TEST_F(Slurm, SrunStartsRanksThatRunTheCollectiveCheckWithoutInfiniRun) {
  auto run = Submit({"srun", "--overcommit", "--ntasks=2", "--kill-on-bad-exit=1",
                     "--export=ALL,MASTER_ADDR=127.0.0.1,MASTER_PORT=" + PortText(),
                     kBinDir + "/parallel_check", "--ccl_backend=gloo", "--threads_per_process=2"},
                    scratch_.path() + "/out");
  const ExitReport report = run->Wait(120s);
  ASSERT_TRUE(report.exited) << run->Output();
  EXPECT_EQ(report.exit_code, 0) << run->Output();
  ExpectEveryRankPassed(run->Output(), 4);
  // The ranks took their places from SLURM_PROCID / SLURM_LOCALID.
  EXPECT_NE(run->Output().find("process 1 local 1"), std::string::npos) << run->Output();
  EXPECT_TRUE(NoProcessLeft());
}

TEST_F(Slurm, SrunStartsOneInfiniRunPerNode) {
  auto run = Submit({"srun", "--nodes=1", "--ntasks=1", kBinDir + "/infini_run", "--nnodes=1",
                     "--nproc_per_node=2", "--ccl_backend=gloo", "--", kBinDir + "/parallel_check",
                     "--threads_per_process=2"},
                    scratch_.path() + "/out");
  const ExitReport report = run->Wait(120s);
  ASSERT_TRUE(report.exited) << run->Output();
  EXPECT_EQ(report.exit_code, 0) << run->Output();
  ExpectEveryRankPassed(run->Output(), 4);
  EXPECT_TRUE(NoProcessLeft());
}

// scripts/slurm/infini_run.sbatch, the example of docs/schedulers.md, on this
// one-node cluster (--nodes=1 overrides the script's 2).
TEST_F(Slurm, SbatchExampleOfTheDocsRunsTheCollectiveCheck) {
  const std::string job_output = scratch_.path() + "/job.out";
  auto run = Submit(
      {"sbatch", "--wait", "--nodes=1", "--output=" + job_output,
       "--export=ALL,INFINI_BIN_DIR=" + kBinDir + ",NPROC_PER_NODE=2,MASTER_PORT=" + PortText(),
       kScriptsDir + "/slurm/infini_run.sbatch", kBinDir + "/parallel_check",
       "--threads_per_process=2"},
      scratch_.path() + "/out");
  const ExitReport report = run->Wait(180s);
  const std::string job = infini::hosts_testing::ReadFile(job_output);
  ASSERT_TRUE(report.exited) << run->Output() << job;
  EXPECT_EQ(report.exit_code, 0) << run->Output() << job;
  ExpectEveryRankPassed(job, 4);
  EXPECT_TRUE(NoProcessLeft());
}

}  // namespace
