#include "transport.h"

#include <unistd.h>

#include <map>
#include <mutex>
#include <string>

namespace infini::gloo_backend {

std::shared_ptr<::gloo::transport::Context> AbortableTcpDevice::createContext(int rank,
                                                                              int world_size) {
  return std::make_shared<AbortableTcpContext>(shared_from_this(), rank, world_size);
}

AbortableTcpContext* GlooContext::transport() const {
  return dynamic_cast<AbortableTcpContext*>(transportContext_.get());
}

std::shared_ptr<::gloo::transport::Device> SharedDevice(const HostAddress& address) {
  struct Devices {
    std::mutex mutex;
    pid_t owner_pid = 0;
    std::map<std::string, std::shared_ptr<::gloo::transport::Device>> by_address;
    // A child's inherited devices have no event-loop thread: never destroy
    // them there (joining would fail); leak them instead.
    ~Devices() {
      if (owner_pid != getpid()) {
        for (auto& [key, device] : by_address) new std::shared_ptr(std::move(device));
      }
    }
  };
  static Devices devices;
  std::lock_guard<std::mutex> lock(devices.mutex);
  if (devices.owner_pid != getpid()) {
    for (auto& [key, device] : devices.by_address) new std::shared_ptr(std::move(device));
    devices.by_address.clear();
    devices.owner_pid = getpid();
  }
  auto& device = devices.by_address[address.numeric];
  if (device == nullptr) {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = address.numeric;
    attr.ai_family = address.is_ipv6 ? AF_INET6 : AF_INET;
    device = std::make_shared<AbortableTcpDevice>(::gloo::transport::tcp::CreateDeviceAttr(attr));
  }
  return device;
}

}  // namespace infini::gloo_backend
