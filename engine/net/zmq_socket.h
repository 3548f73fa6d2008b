// A RAII ZeroMQ socket (C API), used by one thread at a time: an Endpoint's I/O thread.
// Sending moves the frames into ZeroMQ without copying; receiving keeps at most the
// transport's limits worth of frames of one message and drains (discards) the rest, so
// an oversized message cannot grow our memory and cannot desynchronize the next one.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/net/codec.h"
#include "engine/net/context.h"

namespace dlrm::net {

// One multipart message as it came off the socket, before decoding.
struct RawMessage {
  std::string routing_id;     // ROUTER sockets: who sent it
  std::string peer_address;   // the sender's IP as ZeroMQ saw it ("" if unknown)
  std::vector<Frame> frames;  // the frames kept (all of them unless `overflow`)
  int64_t num_frames = 0;     // all frames of the message, kept or not
  int64_t header_bytes = 0;
  int64_t total_bytes = 0;
  bool overflow = false;  // broke a limit: frames is incomplete
};

class ZmqSocket {
 public:
  enum Type { kRouter, kDealer };

  // Applies the options' limits to the socket.
  ZmqSocket(const Context& context, Type type, const TransportOptions& options);
  ~ZmqSocket();
  ZmqSocket(const ZmqSocket&) = delete;
  ZmqSocket& operator=(const ZmqSocket&) = delete;

  // Returns the endpoint actually bound (ZMQ_LAST_ENDPOINT: the port of "tcp://h:*").
  // kNetwork naming the address on failure.
  std::string Bind(const std::string& address);
  void Connect(const std::string& address);

  // Sends one multipart message without blocking: false (nothing sent, frames kept) when
  // ZeroMQ would block. kNetwork on other errors, e.g. an unknown routing id.
  bool TrySend(const std::string* routing_id, std::vector<std::shared_ptr<Frame>>& frames);

  // Receives one message if one is waiting.
  std::optional<RawMessage> TryReceive();

  void* raw() const { return socket_; }

 private:
  std::shared_ptr<void> context_;  // outlives the socket
  void* socket_ = nullptr;
  Type type_;
  int64_t max_frames_;
  int64_t max_message_bytes_;
  int64_t max_header_bytes_;
};

}  // namespace dlrm::net
