// parallel_check: every rank checks the results of each collective over the
// world and over the DP and TP groups of a DP × TP × PP layout. Run it under
// infini_run with any process × thread split, e.g.
//   infini_run --nproc_per_node=4 --ccl_backend=gloo bin/parallel_check --threads_per_process=2
// Modes for tests of failure handling:
//   --mode=hang     --faulty_rank=R: rank R skips a collective (the watchdog must end the run)
//   --mode=stop     --faulty_rank=R: rank R stops itself (SIGSTOP) before the next all_reduce
//   --mode=mismatch --faulty_rank=R: rank R calls all_gather where the others call all_reduce
//   --mode=skip_init --faulty_rank=R: rank R never makes the world group (the others' init
//                   must end at the timeout, naming it)
#include <gflags/gflags.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/common/flags.h"
#include "infini/parallel/context.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/logging.h"
#include "infini/parallel/process_group.h"

DEFINE_int32(threads_per_process, 1, "Ranks (threads) in each process");
DEFINE_int32(nthread_per_process, 0, "InfiniTrain's name of --threads_per_process");
DEFINE_int32(tensor_parallel, 2, "TP size of the layout whose groups are checked");
DEFINE_int32(pipeline_parallel, 2, "PP size of the layout whose groups are checked");
DEFINE_string(ccl_backend, "", "Backend (default: INFINI_CCL_BACKEND, else auto)");
DEFINE_string(mode, "check", "check | hang | stop | mismatch | skip_init");
DEFINE_int32(faulty_rank, 1, "Global rank that misbehaves in --mode=hang/mismatch");

namespace {

using infini::ccl::DeviceBuffer;
using infini::ccl::ReduceOp;
using infini::parallel::ProcessGroup;

constexpr int64_t kCount = 4;  // elements each rank contributes

class Checker {
 public:
  Checker(std::shared_ptr<infini::parallel::Context> context, ProcessGroup& group)
      : context_(std::move(context)), group_(group) {}

  void Run() {
    AllReduce();
    AllGather();
    ReduceScatter();
    Broadcast();
    RingSendRecv();
    PairedSendRecv();
    AsyncWork();
    group_.Barrier();
  }

 private:
  int me() const { return context_->rank().global_rank(); }
  int size() const { return group_.size(); }

  DeviceBuffer Buffer(const std::vector<float>& values) const {
    DeviceBuffer buffer(context_->backend(), values.size() * sizeof(float));
    buffer.CopyFromHost(values.data(), values.size() * sizeof(float));
    return buffer;
  }
  static std::vector<float> Read(const DeviceBuffer& buffer) {
    std::vector<float> values(buffer.bytes() / sizeof(float));
    buffer.CopyToHost(values.data(), buffer.bytes());
    return values;
  }
  static infini::ccl::FlatTensor Tensor(const DeviceBuffer& buffer) {
    return buffer.AsTensor(infini::ccl::dtype::kFloat32,
                           static_cast<int64_t>(buffer.bytes() / sizeof(float)));
  }
  // The values rank `global_rank` contributes.
  static std::vector<float> Contribution(int global_rank, int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) values[i] = static_cast<float>(global_rank * 10 + i);
    return values;
  }
  void Expect(const std::string& what, const std::vector<float>& got,
              const std::vector<float>& expected) const {
    for (size_t i = 0; i < expected.size(); ++i) {
      if (got.at(i) != expected[i]) {
        throw std::runtime_error(what + " on group '" + group_.name() + "': element " +
                                 std::to_string(i) + " is " + std::to_string(got[i]) +
                                 ", expected " + std::to_string(expected[i]));
      }
    }
  }

  void AllReduce() {
    DeviceBuffer send = Buffer(Contribution(me(), kCount));
    DeviceBuffer recv = Buffer(std::vector<float>(kCount, -1));
    group_.AllReduce(Tensor(send), Tensor(recv), ReduceOp::kSum);
    std::vector<float> expected(kCount, 0);
    for (int member : group_.members()) {
      for (int64_t i = 0; i < kCount; ++i) expected[i] += Contribution(member, kCount)[i];
    }
    Expect("all_reduce", Read(recv), expected);
  }

  void AllGather() {
    DeviceBuffer send = Buffer(Contribution(me(), kCount));
    DeviceBuffer recv = Buffer(std::vector<float>(kCount * size(), -1));
    group_.AllGather(Tensor(send), Tensor(recv));
    std::vector<float> expected;
    for (int member : group_.members()) {
      for (float value : Contribution(member, kCount)) expected.push_back(value);
    }
    Expect("all_gather", Read(recv), expected);
  }

  void ReduceScatter() {
    // Block j of rank m's input is m + 100 j + i.
    std::vector<float> input;
    for (int block = 0; block < size(); ++block) {
      for (int64_t i = 0; i < kCount; ++i)
        input.push_back(static_cast<float>(me() + 100 * block + i));
    }
    DeviceBuffer send = Buffer(input);
    DeviceBuffer recv = Buffer(std::vector<float>(kCount, -1));
    group_.ReduceScatter(Tensor(send), Tensor(recv), ReduceOp::kSum);
    std::vector<float> expected(kCount, 0);
    for (int member : group_.members()) {
      for (int64_t i = 0; i < kCount; ++i) {
        expected[i] += static_cast<float>(member + 100 * group_.rank() + i);
      }
    }
    Expect("reduce_scatter", Read(recv), expected);
  }

  void Broadcast() {
    const int root = size() - 1;  // not 0, so a root mix-up shows
    DeviceBuffer send = Buffer(Contribution(me(), kCount));
    DeviceBuffer recv = Buffer(std::vector<float>(kCount, -1));
    group_.Broadcast(Tensor(send), Tensor(recv), root);
    Expect("broadcast", Read(recv), Contribution(group_.GlobalRankOf(root), kCount));
  }

  void RingSendRecv() {
    const int next = (group_.rank() + 1) % size();
    const int previous = (group_.rank() + size() - 1) % size();
    DeviceBuffer send = Buffer(Contribution(me(), kCount));
    DeviceBuffer recv = Buffer(std::vector<float>(kCount, -1));
    group_.SendRecv(Tensor(send), next, Tensor(recv), previous);
    Expect("send_recv (ring)", Read(recv), Contribution(group_.GlobalRankOf(previous), kCount));
  }

  void PairedSendRecv() {
    const int partner = group_.rank() ^ 1;
    if (partner >= size()) return;
    if (group_.rank() % 2 == 0) {
      DeviceBuffer send = Buffer(Contribution(me(), kCount));
      group_.Send(Tensor(send), partner);
    } else {
      DeviceBuffer recv = Buffer(std::vector<float>(kCount, -1));
      group_.Recv(Tensor(recv), partner);
      Expect("send/recv (pairs)", Read(recv), Contribution(group_.GlobalRankOf(partner), kCount));
    }
  }

  void AsyncWork() {
    DeviceBuffer buffer = Buffer(std::vector<float>(kCount, 1));
    auto work = group_.AllReduceAsync(Tensor(buffer), Tensor(buffer), ReduceOp::kSum);
    if (!work->Wait(std::chrono::seconds(60))) {
      throw std::runtime_error("async " + work->Describe() + " did not finish in 60 s");
    }
    if (!work->IsCompleted()) throw std::runtime_error("Wait() returned before completion");
    Expect("all_reduce (async, in place)", Read(buffer),
           std::vector<float>(kCount, static_cast<float>(size())));
  }

  std::shared_ptr<infini::parallel::Context> context_;
  ProcessGroup& group_;
};

void CheckRank(const std::shared_ptr<infini::parallel::Context>& context) {
  const auto& rank = context->rank();
  auto world = context->NewWorldGroup();
  const auto layout = infini::parallel::Layout::ForWorld(rank.world_size(), FLAGS_tensor_parallel,
                                                         FLAGS_pipeline_parallel);
  if (rank.IsMainRank()) std::printf("%s", layout.Overview().c_str());
  auto data_parallel = context->NewLayoutGroup(layout, infini::parallel::Axis::kData);
  auto tensor_parallel = context->NewLayoutGroup(layout, infini::parallel::Axis::kTensor);
  for (ProcessGroup* group : {world.get(), data_parallel.get(), tensor_parallel.get()}) {
    Checker(context, *group).Run();
  }
  std::printf("parallel_check: %s OK (world, %s, %s)\n", rank.ToString().c_str(),
              data_parallel->name().c_str(), tensor_parallel->name().c_str());
}

void Misbehave(const std::shared_ptr<infini::parallel::Context>& context) {
  if (FLAGS_mode == "skip_init" && context->rank().global_rank() == FLAGS_faulty_rank) {
    std::printf("parallel_check: rank %d never makes the world group\n", FLAGS_faulty_rank);
    std::fflush(stdout);
    std::this_thread::sleep_for(context->settings().timeout + std::chrono::seconds(60));
    return;
  }
  auto world = context->NewWorldGroup();
  const bool faulty = context->rank().global_rank() == FLAGS_faulty_rank;
  DeviceBuffer buffer(context->backend(), sizeof(float) * kCount * context->rank().world_size());
  auto one = buffer.AsTensor(infini::ccl::dtype::kFloat32, kCount);
  auto all = buffer.AsTensor(infini::ccl::dtype::kFloat32, kCount * context->rank().world_size());
  world->AllReduce(one, one, ReduceOp::kSum);  // everyone takes part once
  if (FLAGS_mode == "stop") {
    if (faulty) {
      std::printf("parallel_check: rank %d stops itself before the next all_reduce\n",
                  FLAGS_faulty_rank);
      std::fflush(stdout);
      raise(SIGSTOP);
    }
    world->AllReduce(one, one, ReduceOp::kSum);
  } else if (FLAGS_mode == "hang") {
    if (faulty) {
      std::printf("parallel_check: rank %d skips the next all_reduce\n", FLAGS_faulty_rank);
      std::fflush(stdout);
      std::this_thread::sleep_for(context->settings().timeout + std::chrono::seconds(60));
      return;
    }
    world->AllReduce(one, one, ReduceOp::kSum);
  } else if (faulty) {
    world->AllGather(one, all);
  } else {
    world->AllReduce(one, one, ReduceOp::kSum);
  }
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv, "parallel_check [FLAGS]",
                       "Checks collectives over the world, DP and TP groups of every rank.");
  if (FLAGS_nthread_per_process > 0) FLAGS_threads_per_process = FLAGS_nthread_per_process;
  if (FLAGS_mode != "check" && FLAGS_mode != "hang" && FLAGS_mode != "stop" &&
      FLAGS_mode != "mismatch" && FLAGS_mode != "skip_init") {
    std::fprintf(stderr,
                 "parallel_check: --mode=%s: expected check, hang, stop, mismatch or skip_init\n",
                 FLAGS_mode.c_str());
    return 2;
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int thread_rank = 0; thread_rank < FLAGS_threads_per_process; ++thread_rank) {
    threads.emplace_back([thread_rank, &failures] {
      try {
        infini::parallel::ContextOptions options;
        options.thread_rank = thread_rank;
        options.threads_per_process = FLAGS_threads_per_process;
        options.backend = FLAGS_ccl_backend;
        auto context = infini::parallel::Context::Create(options);
        if (FLAGS_mode == "check") {
          CheckRank(context);
        } else {
          Misbehave(context);
        }
      } catch (const std::exception& error) {
        std::fprintf(stderr, "parallel_check: %s\n", error.what());
        std::fflush(stderr);
        ++failures;
        // The other ranks of this process may wait forever for this one.
        if (FLAGS_mode == "check") std::_Exit(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}
