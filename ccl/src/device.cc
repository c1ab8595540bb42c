// Streams, events and buffers: the vendor-neutral device runtime.
#include <cstddef>
#include <utility>

#include "infini/ccl/ccl.h"
#include "infini/ccl/plugin_table.h"
#include "missing_entry.h"
#include "process_exit.h"

namespace infini::ccl {

Stream::Stream(std::shared_ptr<const Backend> backend)
    : backend_(std::move(backend)), owned_(true) {
  backend_->Check(PluginTable(*backend_).stream_create(&handle_), "stream_create");
}

Stream Stream::Default(std::shared_ptr<const Backend> backend) {
  Stream stream;
  stream.backend_ = std::move(backend);
  return stream;
}

Stream Stream::Wrap(std::shared_ptr<const Backend> backend, infiniCclStream_t handle) {
  Stream stream;
  stream.backend_ = std::move(backend);
  stream.handle_ = handle;  // not owned: the framework destroys it
  return stream;
}

Stream::~Stream() {
  // At exit the runtime may be gone (ccl.h): left to the process's end.
  if (internal::ProcessIsExiting()) {
    internal::LeaveToProcessEnd(handle_);
    return;
  }
  if (owned_ && handle_ != nullptr) PluginTable(*backend_).stream_destroy(handle_);
}

Stream::Stream(Stream&& other) noexcept
    : backend_(std::move(other.backend_)),
      handle_(std::exchange(other.handle_, nullptr)),
      owned_(std::exchange(other.owned_, false)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (owned_ && handle_ != nullptr) PluginTable(*backend_).stream_destroy(handle_);
    backend_ = std::move(other.backend_);
    handle_ = std::exchange(other.handle_, nullptr);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

void Stream::Synchronize() const {
  if (backend_ == nullptr) {
    throw Error(
        infiniCclInvalidUsage,
        "Stream::Synchronize on a default-constructed Stream: use Stream::Default(backend)");
  }
  backend_->Check(PluginTable(*backend_).stream_synchronize(handle_), "stream_synchronize");
}

void Stream::WaitEvent(const Event& event) const {
  if (backend_ == nullptr) {
    throw Error(infiniCclInvalidUsage,
                "Stream::WaitEvent on a default-constructed Stream: use Stream::Default(backend)");
  }
  backend_->Check(PluginTable(*backend_).stream_wait_event(handle_, event.handle()),
                  "stream_wait_event");
}

namespace {

// PluginTable() is the host's own v2 table: entries past a plugin's struct_size,
// and those a v1 plugin lacks, are NULL there, so NULL is "not provided".
void RequireCapture(const Backend& backend) {
  const auto& plugin = PluginTable(backend);
  if (plugin.stream_begin_capture == nullptr || plugin.stream_end_capture == nullptr ||
      plugin.graph_launch == nullptr || plugin.graph_destroy == nullptr) {
    throw Error(infiniCclUnsupported,
                backend.info().name + " backend cannot capture stream work into graphs");
  }
}

}  // namespace

void Stream::BeginCapture() const {
  if (backend_ == nullptr) {
    throw Error(infiniCclInvalidUsage, "Stream::BeginCapture needs a created (non-default) stream");
  }
  RequireCapture(*backend_);
  backend_->Check(PluginTable(*backend_).stream_begin_capture(handle_), "stream_begin_capture");
}

Graph Stream::EndCapture() const {
  RequireCapture(*backend_);
  infiniCclGraph_t graph = nullptr;
  backend_->Check(PluginTable(*backend_).stream_end_capture(handle_, &graph), "stream_end_capture");
  return Graph(backend_, graph);
}

Graph::Graph(std::shared_ptr<const Backend> backend, infiniCclGraph_t handle)
    : backend_(std::move(backend)), handle_(handle) {}

Graph::~Graph() {
  if (internal::ProcessIsExiting()) {
    internal::LeaveToProcessEnd(handle_);
    return;
  }
  if (handle_ != nullptr) PluginTable(*backend_).graph_destroy(handle_);
}

Graph::Graph(Graph&& other) noexcept
    : backend_(std::move(other.backend_)), handle_(std::exchange(other.handle_, nullptr)) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) PluginTable(*backend_).graph_destroy(handle_);
    backend_ = std::move(other.backend_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Graph::Launch(const Stream& stream) const {
  backend_->Check(PluginTable(*backend_).graph_launch(handle_, stream.handle()), "graph_launch");
}

Event::Event(std::shared_ptr<const Backend> backend) : backend_(std::move(backend)) {
  backend_->Check(PluginTable(*backend_).event_create(&handle_), "event_create");
}

Event::~Event() {
  if (internal::ProcessIsExiting()) {
    internal::LeaveToProcessEnd(handle_);
    return;
  }
  if (handle_ != nullptr) PluginTable(*backend_).event_destroy(handle_);
}

Event::Event(Event&& other) noexcept
    : backend_(std::move(other.backend_)), handle_(std::exchange(other.handle_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) PluginTable(*backend_).event_destroy(handle_);
    backend_ = std::move(other.backend_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Event::Record(const Stream& stream) const {
  backend_->Check(PluginTable(*backend_).event_record(handle_, stream.handle()), "event_record");
}

bool Event::Query() const {
  int done = 0;
  backend_->Check(PluginTable(*backend_).event_query(handle_, &done), "event_query");
  return done != 0;
}

void Event::Synchronize() const {
  backend_->Check(PluginTable(*backend_).event_synchronize(handle_), "event_synchronize");
}

float Event::ElapsedMsSince(const Event& start) const {
  float milliseconds = 0;
  backend_->Check(PluginTable(*backend_).event_elapsed_ms(start.handle_, handle_, &milliseconds),
                  "event_elapsed_ms");
  return milliseconds;
}

DeviceBuffer::DeviceBuffer(std::shared_ptr<const Backend> backend, size_t bytes)
    : backend_(std::move(backend)), bytes_(bytes) {
  device_index_ = backend_->GetDevice();
  backend_->Check(PluginTable(*backend_).mem_alloc(&data_, bytes), "mem_alloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (internal::ProcessIsExiting()) {
    internal::LeaveToProcessEnd(data_);
    return;
  }
  if (data_ != nullptr) PluginTable(*backend_).mem_free(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : backend_(std::move(other.backend_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_index_(other.device_index_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) PluginTable(*backend_).mem_free(data_);
    backend_ = std::move(other.backend_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_index_ = other.device_index_;
  }
  return *this;
}

FlatTensor DeviceBuffer::AsTensor(DLDataType dtype, int64_t count, int64_t offset) const {
  const size_t end_bytes = static_cast<size_t>(offset + count) * ElementBytes(dtype);
  if (offset < 0 || count < 0 || end_bytes > bytes_) {
    throw Error(infiniCclInvalidArgument,
                "DeviceBuffer::AsTensor: elements [" + std::to_string(offset) + ", " +
                    std::to_string(offset + count) + ") of " + DataTypeName(dtype) +
                    " do not fit in a buffer of " + std::to_string(bytes_) + " bytes");
  }
  void* start = static_cast<char*>(data_) + static_cast<size_t>(offset) * ElementBytes(dtype);
  return FlatTensor(start, dtype, count, DLDevice{backend_->info().device_type, device_index_});
}

namespace {

void CheckRange(size_t bytes, size_t offset_bytes, size_t capacity, const char* what) {
  if (offset_bytes > capacity || bytes > capacity - offset_bytes) {
    throw Error(infiniCclInvalidArgument,
                std::string("DeviceBuffer::") + what + ": " + std::to_string(bytes) +
                    " bytes at offset " + std::to_string(offset_bytes) +
                    " do not fit in a buffer of " + std::to_string(capacity) + " bytes");
  }
}

}  // namespace

void DeviceBuffer::CopyFromHost(const void* host, size_t bytes, size_t offset_bytes) const {
  CheckRange(bytes, offset_bytes, bytes_, "CopyFromHost");
  backend_->MemcpyAsync(static_cast<char*>(data_) + offset_bytes, host, bytes,
                        infiniCclMemcpyHostToDevice);
  Stream::Default(backend_).Synchronize();
}

void DeviceBuffer::CopyToHost(void* host, size_t bytes, size_t offset_bytes) const {
  CheckRange(bytes, offset_bytes, bytes_, "CopyToHost");
  backend_->MemcpyAsync(host, static_cast<char*>(data_) + offset_bytes, bytes,
                        infiniCclMemcpyDeviceToHost);
  Stream::Default(backend_).Synchronize();
}

void Backend::MemcpyAsync(void* destination, const void* source, size_t bytes,
                          infiniCclMemcpyKind_t kind, const Stream& stream) const {
  Check(plugin_->memcpy_async(destination, source, bytes, kind, stream.handle()), "memcpy_async");
}

void Backend::MemsetAsync(void* destination, int byte_value, size_t bytes,
                          const Stream& stream) const {
  Check(plugin_->memset_async(destination, byte_value, bytes, stream.handle()), "memset_async");
}

// Registration lives beside the device memory it registers.
BufferRegistration Communicator::Register(void* data, size_t bytes) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "Register: the communicator is not valid");
  }
  if (data == nullptr || bytes == 0) {
    throw Error(infiniCclInvalidArgument,
                "Register: expected a device buffer and a byte count above 0, got " +
                    std::string(data == nullptr ? "no buffer" : "0 bytes"));
  }
  if (plugin_->comm_register == nullptr) {
    internal::RefuseMissingEntry(backend_->info().name, "comm_register");
  }
  void* registration = nullptr;
  backend_->Check(plugin_->comm_register(handle(), data, bytes, &registration), "comm_register");
  return BufferRegistration(backend_, handle(), registration);
}

BufferRegistration Communicator::RegisterWindow(void* data, size_t bytes, uint32_t flags) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "RegisterWindow: the communicator is not valid");
  }
  if (data == nullptr || bytes == 0) {
    throw Error(infiniCclInvalidArgument,
                "RegisterWindow: expected a device buffer and a byte count above 0, got " +
                    std::string(data == nullptr ? "no buffer" : "0 bytes"));
  }
  if (plugin_->comm_window_register == nullptr) {
    internal::RefuseMissingEntry(backend_->info().name, "comm_window_register");
  }
  void* registration = nullptr;
  backend_->Check(plugin_->comm_window_register(handle(), data, bytes, flags, &registration),
                  "comm_window_register");
  return BufferRegistration(backend_, handle(), registration, /*window=*/true);
}

BufferRegistration::BufferRegistration(std::shared_ptr<const Backend> backend, infiniCclComm_t comm,
                                       void* handle, bool window)
    : backend_(std::move(backend)), comm_(comm), handle_(handle), window_(window) {}

infiniCclResult_t BufferRegistration::CallDeregister(infiniCclComm_t comm, void* handle) const {
  const infiniCclPlugin_t& plugin = PluginTable(*backend_);
  return window_ ? plugin.comm_window_deregister(comm, handle)
                 : plugin.comm_deregister(comm, handle);
}

BufferRegistration::~BufferRegistration() {
  if (comm_ == nullptr || internal::ProcessIsExiting()) return;
  CallDeregister(comm_, handle_);
}

BufferRegistration::BufferRegistration(BufferRegistration&& other) noexcept
    : backend_(std::move(other.backend_)),
      comm_(std::exchange(other.comm_, nullptr)),
      handle_(std::exchange(other.handle_, nullptr)),
      window_(other.window_) {}

BufferRegistration& BufferRegistration::operator=(BufferRegistration&& other) noexcept {
  if (this != &other) {
    if (comm_ != nullptr) CallDeregister(comm_, handle_);
    backend_ = std::move(other.backend_);
    comm_ = std::exchange(other.comm_, nullptr);
    handle_ = std::exchange(other.handle_, nullptr);
    window_ = other.window_;
  }
  return *this;
}

void BufferRegistration::Forget() {
  comm_ = nullptr;
  handle_ = nullptr;
}

void BufferRegistration::Deregister() {
  if (comm_ == nullptr) return;
  const infiniCclComm_t comm = std::exchange(comm_, nullptr);
  backend_->Check(CallDeregister(comm, std::exchange(handle_, nullptr)),
                  window_ ? "comm_window_deregister" : "comm_deregister");
}

}  // namespace infini::ccl
