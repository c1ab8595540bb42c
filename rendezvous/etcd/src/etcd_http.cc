#include "etcd_http.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <mutex>

#include "infini/rendezvous/store.h"

namespace infini::rendezvous::etcd {
namespace {

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t AppendToString(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// The state of one streaming reply: bytes not yet a whole message.
struct StreamState {
  std::string pending;
  const std::function<bool(const Json&)>* on_message;
  const std::function<bool()>* keep_going;
  std::chrono::steady_clock::time_point deadline;
  TrafficCounters* counters;
  bool ended_by_message = false;
  std::string malformed;
};

size_t ConsumeStream(char* data, size_t size, size_t count, void* opaque) {
  auto* state = static_cast<StreamState*>(opaque);
  state->counters->bytes_received += size * count;
  state->pending.append(data, size * count);
  // The gateway ends each message with a newline.
  size_t end;
  while ((end = state->pending.find('\n')) != std::string::npos) {
    std::string message = state->pending.substr(0, end);
    state->pending.erase(0, end + 1);
    if (message.find_first_not_of(" \r\t") == std::string::npos) continue;
    Json parsed;
    try {
      parsed = Json::parse(message);
    } catch (const Json::parse_error& error) {
      state->malformed = error.what();
      return 0;
    }
    if (!(*state->on_message)(parsed)) {
      state->ended_by_message = true;
      return 0;  // aborts the transfer
    }
  }
  return size * count;
}

int CheckStreamProgress(void* opaque, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* state = static_cast<StreamState*>(opaque);
  if (!(*state->keep_going)()) return 1;
  return std::chrono::steady_clock::now() >= state->deadline ? 1 : 0;
}

bool IsMemberLost(CURLcode code) {
  return code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
         code == CURLE_OPERATION_TIMEDOUT || code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR ||
         code == CURLE_GOT_NOTHING || code == CURLE_PARTIAL_FILE;
}

}  // namespace

EtcdHttp::EtcdHttp(std::vector<std::string> endpoints, std::chrono::milliseconds request_timeout,
                   std::shared_ptr<TrafficCounters> counters)
    : endpoints_(std::move(endpoints)),
      request_timeout_(request_timeout),
      counters_(std::move(counters)) {
  InitCurlOnce();
  curl_ = curl_easy_init();
  if (!curl_) throw StoreError("libcurl could not start a connection");
}

namespace {

curl_socket_t OpenRecordedSocket(void* self, curlsocktype /*purpose*/, curl_sockaddr* address) {
  const int fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  if (fd < 0) return CURL_SOCKET_BAD;
  static_cast<EtcdHttp*>(self)->RecordSocket(fd);
  return fd;
}

int CloseRecordedSocket(void* self, curl_socket_t fd) {
  // Forgotten first, so that Interrupt never shuts down a reused number.
  static_cast<EtcdHttp*>(self)->ForgetSocket(fd);
  return close(fd);
}

// Every request of one EtcdHttp goes through these, so that Interrupt can
// reach its socket.
void UseRecordedSockets(CURL* curl, EtcdHttp* self) {
  curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, OpenRecordedSocket);
  curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, self);
  curl_easy_setopt(curl, CURLOPT_CLOSESOCKETFUNCTION, CloseRecordedSocket);
  curl_easy_setopt(curl, CURLOPT_CLOSESOCKETDATA, self);
}

// Frees a request's header list when the request is done.
struct HeaderListDeleter {
  void operator()(curl_slist* headers) const { curl_slist_free_all(headers); }
};
using HeaderList = std::unique_ptr<curl_slist, HeaderListDeleter>;

// What every request to etcd sets: a fresh handle state, our recorded
// sockets, the URL and JSON body, where the reply goes, no signals, and the
// JSON (and, when logged in, authorization) headers.
HeaderList PrepareRequest(CURL* curl, EtcdHttp* self, const std::string& url,
                          const std::string& body, curl_write_callback write, void* sink,
                          const std::string& auth_token) {
  curl_easy_reset(curl);
  UseRecordedSockets(curl, self);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, sink);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_slist* list = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!auth_token.empty()) {
    list = curl_slist_append(list, ("Authorization: " + auth_token).c_str());
  }
  HeaderList headers(list);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  return headers;
}

}  // namespace

EtcdHttp::~EtcdHttp() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

std::string EtcdHttp::endpoints_text() const {
  std::string text;
  for (const std::string& endpoint : endpoints_) text += (text.empty() ? "" : ",") + endpoint;
  return text;
}

void EtcdHttp::RecordSocket(int socket_fd) {
  std::lock_guard lock(socket_mutex_);
  socket_fd_ = socket_fd;
}

void EtcdHttp::ForgetSocket(int socket_fd) {
  std::lock_guard lock(socket_mutex_);
  if (socket_fd_ == socket_fd) socket_fd_ = -1;
}

void EtcdHttp::Interrupt() {
  std::lock_guard lock(socket_mutex_);
  if (socket_fd_ >= 0) shutdown(socket_fd_, SHUT_RDWR);
}

void EtcdHttp::NextMember() { current_ = (current_ + 1) % endpoints_.size(); }

Json EtcdHttp::Call(const std::string& path, const std::string& body) {
  CURL* curl = static_cast<CURL*>(curl_);
  std::string last_error;
  for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
    const std::string url = "http://" + endpoints_[current_] + path;
    std::string reply;
    const HeaderList headers =
        PrepareRequest(curl, this, url, body, AppendToString, &reply, auth_token_);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(request_timeout_.count()));
    const CURLcode code = curl_easy_perform(curl);
    ++counters_->requests;
    counters_->bytes_sent += body.size();
    counters_->bytes_received += reply.size();
    if (code != CURLE_OK) {
      last_error = endpoints_[current_] + ": " + curl_easy_strerror(code);
      if (!IsMemberLost(code)) throw StoreError("etcd at " + last_error);
      NextMember();
      continue;
    }
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    Json parsed;
    try {
      parsed = Json::parse(reply);
    } catch (const Json::parse_error& error) {
      throw StoreError("etcd at " + endpoints_[current_] + " sent a reply that is not JSON (" +
                       error.what() + ")");
    }
    if (status != 200) {
      const std::string message = Text(At(parsed, "/message")).empty()
                                      ? Text(At(parsed, "/error"))
                                      : Text(At(parsed, "/message"));
      if (status == 503) {  // this member lost its quorum or leader: try another
        last_error = endpoints_[current_] + ": " + message;
        NextMember();
        continue;
      }
      throw StoreError("etcd at " + endpoints_[current_] + " refused " + path + " (HTTP " +
                       std::to_string(status) + "): " + message);
    }
    return parsed;
  }
  throw StoreError("no etcd member answered at " + endpoints_text() + " (last: " + last_error +
                   ")");
}

bool EtcdHttp::Stream(const std::string& path, const std::string& body,
                      const std::function<bool(const Json&)>& on_message,
                      const std::function<bool()>& keep_going,
                      std::chrono::steady_clock::time_point deadline) {
  CURL* curl = static_cast<CURL*>(curl_);
  const std::string url = "http://" + endpoints_[current_] + path;
  StreamState state{"", &on_message, &keep_going, deadline, counters_.get(), false, ""};
  const HeaderList headers =
      PrepareRequest(curl, this, url, body, ConsumeStream, &state, auth_token_);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, CheckStreamProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &state);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request_timeout_.count()));
  // A member that dies without closing the socket: no byte for this long.
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPIDLE, 2L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPINTVL, 1L);
  const CURLcode code = curl_easy_perform(curl);
  ++counters_->requests;
  counters_->bytes_sent += body.size();
  if (state.ended_by_message) return true;
  if (!state.malformed.empty()) {
    throw StoreError("etcd at " + endpoints_[current_] +
                     " sent a watch message that is not JSON (" + state.malformed + ")");
  }
  if (code == CURLE_ABORTED_BY_CALLBACK) return false;
  throw StoreError("etcd at " + endpoints_[current_] + ": watch ended (" +
                   curl_easy_strerror(code) + ")");
}

std::string Base64Encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(bytes.data()),
                                      static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(written));
  return out;
}

std::string Base64Decode(const std::string& text) {
  if (text.empty()) return "";
  std::string out(3 * (text.size() / 4) + 3, '\0');
  const int written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(text.data()),
                                      static_cast<int>(text.size()));
  if (written < 0) throw StoreError("etcd sent a key or value that is not base64");
  size_t padding = 0;
  for (size_t i = text.size(); i > 0 && text[i - 1] == '='; --i) ++padding;
  out.resize(static_cast<size_t>(written) - padding);
  return out;
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xFF) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace infini::rendezvous::etcd
