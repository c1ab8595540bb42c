#include "reducer_scenarios.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/parallel/gradient_reducer.h"

namespace infini::parallel::testing {
namespace {

using ccl::ReduceOp;

// Host bytes of one gradient's values.
using Bytes = std::vector<unsigned char>;

void CopyToDevice(const ccl::Backend& backend, const DLTensor& tensor, const Bytes& host) {
  backend.MemcpyAsync(ccl::DataPointer(tensor), host.data(), host.size(),
                      infiniCclMemcpyHostToDevice);
  ccl::Stream::Default(backend.shared_from_this()).Synchronize();
}

Bytes CopyToHost(const ccl::Backend& backend, const DLTensor& tensor) {
  Bytes host(static_cast<size_t>(ccl::NumElements(tensor)) * ccl::ElementBytes(tensor.dtype));
  backend.MemcpyAsync(host.data(), ccl::DataPointer(tensor), host.size(),
                      infiniCclMemcpyDeviceToHost);
  ccl::Stream::Default(backend.shared_from_this()).Synchronize();
  return host;
}

uint16_t BFloat16Bits(float value) {  // truncation: the value is then exact
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

// Values of one gradient on one rank, as bytes of `dtype`. With more than two
// ranks, the ring sums an element in an order that depends on where it lies
// in the buffer, so values are small integers whose sums are exact in any
// order; with two, a + b == b + a and any float will do.
Bytes MakeValues(DLDataType dtype, size_t count, bool exact_sums, std::mt19937_64& random) {
  std::uniform_real_distribution<float> any(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small(-40, 40);
  Bytes bytes(count * ccl::ElementBytes(dtype));
  for (size_t i = 0; i < count; ++i) {
    const float value = exact_sums ? static_cast<float>(small(random)) : any(random);
    if (ccl::operator==(dtype, ccl::dtype::kBFloat16)) {
      const uint16_t bits = BFloat16Bits(value);
      std::memcpy(bytes.data() + i * 2, &bits, 2);
    } else {
      std::memcpy(bytes.data() + i * 4, &value, 4);
    }
  }
  return bytes;
}

std::vector<GradientSpec> RandomSpecs(const ccl::Backend& backend, size_t bucket_bytes,
                                      std::mt19937_64& random) {
  const bool bf16 = backend.capabilities().Supports(ccl::Collective::kAllReduce,
                                                    ccl::dtype::kBFloat16, ReduceOp::kAvg);
  std::uniform_int_distribution<size_t> count(1, 3 * bucket_bytes / 8);
  std::vector<GradientSpec> specs;
  for (int i = 0; i < 24; ++i) {
    const DLDataType dtype = (bf16 && i % 3 == 1) ? ccl::dtype::kBFloat16 : ccl::dtype::kFloat32;
    specs.push_back({"g" + std::to_string(i), dtype, count(random)});
  }
  specs[5].count = 5 * bucket_bytes / 4;  // larger than a bucket
  specs[6].count = 1;
  return specs;
}

// Expected result: each gradient all_reduced alone.
std::vector<Bytes> PlainAllReduce(Context& context, ProcessGroup& group,
                                  const std::vector<GradientSpec>& specs,
                                  const std::vector<Bytes>& values, ReduceOp op) {
  std::vector<Bytes> results;
  for (size_t i = 0; i < specs.size(); ++i) {
    ccl::DeviceBuffer buffer(context.backend(), values[i].size());
    buffer.CopyFromHost(values[i].data(), values[i].size());
    auto tensor = buffer.AsTensor(specs[i].dtype, static_cast<int64_t>(specs[i].count));
    group.AllReduce(tensor, tensor, op);
    results.push_back(CopyToHost(*context.backend(), tensor));
  }
  return results;
}

std::string CompareWithPlain(const GradientReducer& reducer, Context& context,
                             const std::vector<GradientSpec>& specs,
                             const std::vector<Bytes>& expected, const std::string& step) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const Bytes got = CopyToHost(*context.backend(), reducer.Gradient(i));
    if (got != expected[i]) {
      size_t element = 0;
      const size_t element_bytes = ccl::ElementBytes(specs[i].dtype);
      while (std::memcmp(got.data() + element * element_bytes,
                         expected[i].data() + element * element_bytes, element_bytes) == 0) {
        ++element;
      }
      return step + ": gradient '" + specs[i].name + "' (" + std::to_string(specs[i].count) + " " +
             ccl::DataTypeName(specs[i].dtype) + ") differs from a plain all_reduce at element " +
             std::to_string(element);
    }
  }
  return "";
}

// One step: write every gradient, mark them in `order`, wait.
void RunStep(GradientReducer& reducer, Context& context, const std::vector<Bytes>& values,
             const std::vector<size_t>& order) {
  const auto compute = ccl::Stream::Default(context.backend());
  for (size_t i : order) {
    CopyToDevice(*context.backend(), reducer.Gradient(i), values[i]);
    reducer.MarkReady(i, compute);
  }
  reducer.WaitAll(compute);
  compute.Synchronize();
}

std::vector<size_t> InOrder(size_t count) {
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

}  // namespace

uint64_t NextSequenceNumber(Context& context, ProcessGroup& group) {
  ccl::DeviceBuffer buffer(context.backend(), sizeof(float));
  auto tensor = buffer.AsTensor(ccl::dtype::kFloat32, 1);
  auto work = group.AllReduceAsync(tensor, tensor, ReduceOp::kSum);
  work->Wait();
  const std::string description = work->Describe();  // "all_reduce #3 on ..."
  const size_t hash = description.find('#');
  return hash == std::string::npos ? ~uint64_t{0} : std::stoull(description.substr(hash + 1));
}

std::string CheckBucketsMatchPlainAllReduce(Context& context, ProcessGroup& group, uint64_t seed) {
  constexpr size_t kBucketBytes = 256;
  std::mt19937_64 shared(seed);  // the same on every rank
  const auto specs = RandomSpecs(*context.backend(), kBucketBytes, shared);
  GradientReducer reducer(group, specs, {.bucket_bytes = kBucketBytes, .average = true});
  if (reducer.num_buckets() < 10) {
    return "expected many buckets, got " + std::to_string(reducer.num_buckets());
  }
  const ReduceOp op = reducer.needs_scaling() ? ReduceOp::kSum : ReduceOp::kAvg;
  const bool exact_sums = group.size() > 2;
  std::mt19937_64 mine(seed * 1000 + static_cast<uint64_t>(group.rank()) + 1);

  for (int step = 0; step < 2; ++step) {
    std::vector<Bytes> values;
    for (const auto& spec : specs)
      values.push_back(MakeValues(spec.dtype, spec.count, exact_sums, mine));
    std::vector<size_t> order = InOrder(specs.size());
    if (step == 1) std::shuffle(order.begin(), order.end(), mine);  // differs by rank
    RunStep(reducer, context, values, order);
    const auto expected = PlainAllReduce(context, group, specs, values, op);
    std::string difference =
        CompareWithPlain(reducer, context, specs, expected,
                         step == 0 ? "step marked in order" : "step marked in a shuffled order");
    if (!difference.empty()) return difference;
  }
  return "";
}

std::string CheckAccumulationCommunicatesOnlyOnTheLastMicroStep(Context& context,
                                                                ProcessGroup& group) {
  constexpr int kMicroSteps = 4;
  const std::vector<GradientSpec> specs = {{"a", ccl::dtype::kFloat32, 70},
                                           {"b", ccl::dtype::kFloat32, 9},
                                           {"c", ccl::dtype::kFloat32, 40}};
  GradientReducer reducer(group, specs, {.bucket_bytes = 128, .average = true});
  std::mt19937_64 mine(77 + static_cast<uint64_t>(group.rank()));
  std::vector<Bytes> sums;
  for (const auto& spec : specs) sums.emplace_back(spec.count * sizeof(float), 0);

  const uint64_t before = NextSequenceNumber(context, group);
  for (int micro = 0; micro < kMicroSteps; ++micro) {
    const bool last = micro == kMicroSteps - 1;
    reducer.SetSynchronize(last);
    // The model adds this micro-step's gradient into the storage.
    for (size_t i = 0; i < specs.size(); ++i) {
      const Bytes values = MakeValues(specs[i].dtype, specs[i].count, /*exact_sums=*/true, mine);
      for (size_t e = 0; e < specs[i].count; ++e) {
        float sum, value;
        std::memcpy(&sum, sums[i].data() + e * 4, 4);
        std::memcpy(&value, values.data() + e * 4, 4);
        sum += value;
        std::memcpy(sums[i].data() + e * 4, &sum, 4);
      }
    }
    RunStep(reducer, context, sums, InOrder(specs.size()));
    if (!last) {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (CopyToHost(*context.backend(), reducer.Gradient(i)) != sums[i]) {
          return "micro-step " + std::to_string(micro) + ": gradient '" + specs[i].name +
                 "' was changed although synchronization was off";
        }
      }
    }
    if (micro == kMicroSteps - 2) {
      const uint64_t now = NextSequenceNumber(context, group);
      if (now != before + 1) {
        return std::to_string(now - before - 1) +
               " operations reached the group during micro-steps without synchronization";
      }
    }
  }
  const uint64_t after = NextSequenceNumber(context, group);
  if (after != before + 2 + reducer.num_buckets()) {
    return "the last micro-step issued " + std::to_string(after - before - 2) +
           " operations, expected one per bucket (" + std::to_string(reducer.num_buckets()) + ")";
  }
  const ReduceOp op = reducer.needs_scaling() ? ReduceOp::kSum : ReduceOp::kAvg;
  const auto expected = PlainAllReduce(context, group, specs, sums, op);
  return CompareWithPlain(reducer, context, specs, expected, "after accumulation");
}

}  // namespace infini::parallel::testing
