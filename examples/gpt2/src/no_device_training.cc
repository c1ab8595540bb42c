// Builds without CUDA: the host path only.
#include <stdexcept>

#include "device_training.h"

namespace infini::examples::gpt2 {

bool DeviceTrainingAvailable() { return false; }

std::unique_ptr<DeviceTraining> CreateDeviceTraining(const DeviceTrainingOptions&, const Model&,
                                                     DataParallelGroup& group) {
  throw std::runtime_error("the backend " + group.description() +
                           " computes on a GPU but gpt2 was built without CUDA: rebuild with the "
                           "CUDA toolkit, or use --ccl_backend=gloo");
}

}  // namespace infini::examples::gpt2
