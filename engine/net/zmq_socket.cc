#include "engine/net/zmq_socket.h"

#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "engine/core/status.h"

namespace dlrm::net {
namespace {

// Payloads at least this big are handed to ZeroMQ by reference (no copy); smaller ones
// are copied, which is cheaper than the bookkeeping.
constexpr size_t kZeroCopyBytes = 256;

// A zmq_msg_t that is always closed.
class ZmqMsg {
 public:
  ZmqMsg() { zmq_msg_init(&msg_); }
  ~ZmqMsg() { zmq_msg_close(&msg_); }
  ZmqMsg(const ZmqMsg&) = delete;
  ZmqMsg& operator=(const ZmqMsg&) = delete;
  zmq_msg_t* get() { return &msg_; }

 private:
  zmq_msg_t msg_;
};

// What keeps a zero-copy frame alive while ZeroMQ holds it. ZeroMQ hands it from the
// sending thread to its own through lock-free pipes in uninstrumented code; the
// release/acquire pair on `handed_over` states that ordering in a way ThreadSanitizer
// sees (it costs nothing on x86).
struct FrameHolder {
  std::shared_ptr<Frame> frame;
  std::atomic<bool> handed_over{false};
};

// ZeroMQ calls this (from its own thread) when it is done with a zero-copy frame; the
// hint is the FrameHolder.
void ReleaseFrame(void* /*data*/, void* hint) {
  std::unique_ptr<FrameHolder> holder(static_cast<FrameHolder*>(hint));
  [[maybe_unused]] const bool handed_over = holder->handed_over.load(std::memory_order_acquire);
}

std::string ZmqError() { return zmq_strerror(zmq_errno()); }

void SetOption(void* socket, int option, int value, const char* name) {
  if (zmq_setsockopt(socket, option, &value, sizeof value) != 0)
    Throw(StatusCode::kNetwork, "zmq_setsockopt(", name, ", ", value, "): ", ZmqError());
}

void EnableIpv6For(void* socket, const std::string& address) {
  // Only bracketed addresses need it; leaving it off elsewhere keeps "localhost" on IPv4.
  if (address.find('[') != std::string::npos) SetOption(socket, ZMQ_IPV6, 1, "ZMQ_IPV6");
}

}  // namespace

Context::Context() {
  void* ctx = zmq_ctx_new();
  if (ctx == nullptr) Throw(StatusCode::kNetwork, "zmq_ctx_new: ", ZmqError());
  // Sockets are closed with a bounded linger, so terminating never waits for long.
  ctx_ = std::shared_ptr<void>(ctx, [](void* c) {
    while (zmq_ctx_term(c) != 0 && zmq_errno() == EINTR) {
    }
  });
}

ZmqSocket::ZmqSocket(const Context& context, Type type, const TransportOptions& options)
    : context_(context.handle()),
      type_(type),
      max_frames_(options.max_frames),
      max_message_bytes_(options.max_message_bytes),
      max_header_bytes_(options.max_header_bytes) {
  socket_ = zmq_socket(context_.get(), type == kRouter ? ZMQ_ROUTER : ZMQ_DEALER);
  if (socket_ == nullptr) Throw(StatusCode::kNetwork, "zmq_socket: ", ZmqError());
  try {
    SetOption(socket_, ZMQ_LINGER, static_cast<int>(options.linger_ms), "ZMQ_LINGER");
    // ZeroMQ drops the connection of a peer that sends a larger frame, before storing it.
    const int64_t max_frame = options.max_message_bytes;
    if (zmq_setsockopt(socket_, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) != 0)
      Throw(StatusCode::kNetwork, "zmq_setsockopt(ZMQ_MAXMSGSIZE): ", ZmqError());
    SetOption(socket_, ZMQ_RCVHWM, options.receive_queue_limit, "ZMQ_RCVHWM");
    // Our own outgoing messages are never dropped: the sender bounds what is in flight.
    SetOption(socket_, ZMQ_SNDHWM, 0, "ZMQ_SNDHWM");
    // A reply to a peer that has gone is an error we report, not a silent drop.
    if (type == kRouter) SetOption(socket_, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY");
    if (type == kDealer && !options.routing_id.empty() &&
        zmq_setsockopt(socket_, ZMQ_ROUTING_ID, options.routing_id.data(),
                       options.routing_id.size()) != 0)
      Throw(StatusCode::kNetwork, "zmq_setsockopt(ZMQ_ROUTING_ID): ", ZmqError());
  } catch (...) {
    zmq_close(socket_);
    throw;
  }
}

ZmqSocket::~ZmqSocket() { zmq_close(socket_); }

std::string ZmqSocket::Bind(const std::string& address) {
  EnableIpv6For(socket_, address);
  if (zmq_bind(socket_, address.c_str()) != 0)
    Throw(StatusCode::kNetwork, "cannot bind ", address, ": ", ZmqError());
  char endpoint[1024];
  size_t size = sizeof endpoint;
  if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, endpoint, &size) != 0)
    Throw(StatusCode::kNetwork, "cannot read the endpoint bound for ", address, ": ", ZmqError());
  return std::string(endpoint);
}

void ZmqSocket::Connect(const std::string& address) {
  EnableIpv6For(socket_, address);
  if (zmq_connect(socket_, address.c_str()) != 0)
    Throw(StatusCode::kNetwork, "cannot connect to ", address, ": ", ZmqError());
}

bool ZmqSocket::TrySend(const std::string* routing_id,
                        std::vector<std::shared_ptr<Frame>>& frames) {
  DLRM_INTERNAL_CHECK(!frames.empty());
  bool first = true;
  if (routing_id != nullptr) {
    if (zmq_send(socket_, routing_id->data(), routing_id->size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
      if (zmq_errno() == EAGAIN) return false;
      Throw(StatusCode::kNetwork, "cannot send to peer: ", ZmqError());
    }
    first = false;
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    ZmqMsg msg;
    const Frame& f = *frames[i];
    if (f.size() >= kZeroCopyBytes) {
      auto holder = std::make_unique<FrameHolder>();
      holder->frame = frames[i];
      holder->handed_over.store(true, std::memory_order_release);
      zmq_msg_close(msg.get());
      if (zmq_msg_init_data(msg.get(), const_cast<uint8_t*>(f.data()), f.size(), ReleaseFrame,
                            holder.get()) != 0) {
        zmq_msg_init(msg.get());
        Throw(StatusCode::kNetwork, "zmq_msg_init_data: ", ZmqError());
      }
      holder.release();  // owned by the message now; ReleaseFrame frees it
    } else {
      zmq_msg_close(msg.get());
      if (zmq_msg_init_size(msg.get(), f.size()) != 0) {
        zmq_msg_init(msg.get());
        Throw(StatusCode::kNetwork, "zmq_msg_init_size: ", ZmqError());
      }
      if (!f.empty()) std::memcpy(zmq_msg_data(msg.get()), f.data(), f.size());
    }
    const int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_msg_send(msg.get(), socket_, flags) < 0) {
      // ZeroMQ admits a multipart message whole or not at all at its first frame.
      if (first && zmq_errno() == EAGAIN) return false;
      Throw(StatusCode::kNetwork, "cannot send frame ", i, ": ", ZmqError());
    }
    // On success ZeroMQ owns the content and left msg empty; closing it is a no-op.
    first = false;
  }
  return true;
}

std::optional<RawMessage> ZmqSocket::TryReceive() {
  RawMessage raw;
  bool more = true;
  bool first = true;
  bool routing_frame = type_ == kRouter;
  while (more) {
    ZmqMsg msg;
    // Later parts of a multipart message are delivered together with the first.
    if (zmq_msg_recv(msg.get(), socket_, first ? ZMQ_DONTWAIT : 0) < 0) {
      if (first && (zmq_errno() == EAGAIN || zmq_errno() == EINTR)) return std::nullopt;
      Throw(StatusCode::kNetwork, "receive failed: ", ZmqError());
    }
    first = false;
    if (raw.peer_address.empty()) {
      // Not every frame carries the connection's metadata (ROUTER routing-id frames
      // sometimes lack it), so ask each until one answers.
      const char* peer = zmq_msg_gets(msg.get(), "Peer-Address");
      if (peer != nullptr) raw.peer_address = peer;
    }
    more = zmq_msg_more(msg.get()) != 0;
    const auto* data = static_cast<const uint8_t*>(zmq_msg_data(msg.get()));
    const size_t size = zmq_msg_size(msg.get());
    if (routing_frame) {
      raw.routing_id.assign(reinterpret_cast<const char*>(data), size);
      routing_frame = false;
      continue;
    }
    ++raw.num_frames;
    raw.total_bytes += static_cast<int64_t>(size);
    if (raw.num_frames == 1) raw.header_bytes = static_cast<int64_t>(size);
    if (!raw.overflow && (raw.num_frames > max_frames_ || raw.total_bytes > max_message_bytes_ ||
                          raw.header_bytes > max_header_bytes_)) {
      raw.overflow = true;
      raw.frames.clear();
      raw.frames.shrink_to_fit();
    }
    if (!raw.overflow) raw.frames.emplace_back(data, data + size);
  }
  return raw;
}

}  // namespace dlrm::net
