// A transport endpoint: one ZeroMQ socket driven by its own I/O thread, so that sends
// never block the caller, replies can be awaited from several threads, and an injected
// propagation delay (TransportOptions::delay_ms) overlaps across messages in flight.
//
// Two kinds:
//   kListen  (ZeroMQ ROUTER) binds an address; any number of peers connect. Each
//            received message says who sent it (Received::from); Reply/Send answer them.
//   kConnect (ZeroMQ DEALER) connects to one listening endpoint. Many requests may be
//            outstanding at once; replies come back in any order, matched by request id
//            (ReceiveReply; net::Client does the bookkeeping).
//
// Every received message is decoded (codec.h) on the I/O thread. A message that breaks
// a rule is logged (DLRM_LOG WARNING), counted in stats() and dropped; a listening endpoint
// also answers its sender with an ERROR (kDataLoss) naming the rule, so a misconfigured
// peer learns why instead of timing out. Nothing a peer sends stops the endpoint.
//
// Every wait (Receive, TryReceive, ReceiveReply) fails at once, with the signal's code and
// reason, once TransportOptions::abort is raised (abort.h), even TryReceive.
//
// Thread safety: every method may be called from any thread concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/net/codec.h"
#include "engine/net/context.h"
#include "engine/net/event_fd.h"
#include "engine/net/message.h"
#include "engine/net/options.h"

namespace dlrm::net {

class ZmqSocket;
struct RawMessage;

struct Peer {
  // The ZeroMQ routing id of the sender (opaque bytes); empty on connecting endpoints.
  std::string routing_id;
  // The sender's IP address as ZeroMQ saw it, for logs; may be empty.
  std::string address;
};

struct Received {
  Message message;
  Peer from;
};

// Which connection speaks for each rank of a job (the roster's links: ZeroMQ routing ids,
// by rank). A message is rank r's only when its header names sender_rank r, r is a rank,
// and it came over r's link: what the coordinator, the embedding servers and the
// trainers' all-gather accept. A link still unknown (empty) matches nothing.
class RankLinks {
 public:
  RankLinks() = default;
  explicit RankLinks(std::vector<std::string> links) : links_(std::move(links)) {}
  int32_t size() const { return static_cast<int32_t>(links_.size()); }
  // Rank r's link (r in [0, size)); empty while unknown.
  const std::string& link(int32_t rank) const { return links_[static_cast<size_t>(rank)]; }
  // Rank r's link from now on (r in [0, size)).
  void Set(int32_t rank, std::string link);
  // Whether the header names a rank in [0, size) (the codec refuses negative ranks).
  bool NamesARank(const Received& r) const;
  // The rank r names when it comes over that rank's link; nullopt otherwise.
  std::optional<int32_t> RankOf(const Received& r) const;

 private:
  std::vector<std::string> links_;
};

struct EndpointStats {
  int64_t sent = 0;
  int64_t received = 0;       // accepted messages
  int64_t rejected = 0;       // malformed or unauthenticated messages dropped
  int64_t send_failures = 0;  // e.g. a reply to a peer that has disconnected
  std::string last_rejection;
  std::string last_send_failure;
};

class Endpoint {
 public:
  enum Kind { kListen, kConnect };

  // kListen binds `address` ("tcp://127.0.0.1:*" picks a free port; address() tells
  // which); kConnect connects to it. Connecting succeeds even when nobody listens yet:
  // ZeroMQ keeps retrying, and a Receive times out naming the peer. `name` says who the
  // peer is in errors and logs ("coordinator", "server 3"). kNetwork if the bind fails,
  // kInvalidArgument for invalid options.
  Endpoint(const Context& context, Kind kind, const std::string& address,
           const TransportOptions& options, std::string name);
  // Sends what is queued (waiting out injected delays) for up to options.linger_ms.
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Kind kind() const { return kind_; }
  // The bound endpoint (port resolved) for kListen, the peer's address for kConnect.
  const std::string& address() const { return address_; }
  const std::string& name() const { return name_; }

  // Queues a message and returns at once; it leaves delay_ms later. On a listening
  // endpoint `to` must name a peer that sent something (Received::from); on a connecting
  // endpoint `to` must be empty. kInvalidArgument for a message the encoder rejects;
  // kNetwork if the I/O thread has failed. A send that fails later (the peer has gone)
  // is logged and counted in stats(); the caller sees it as a timed-out reply.
  void Send(Message message, const Peer& to = {});
  // Sends `reply` to the sender of `request`, echoing its request id.
  void Reply(const Received& request, Message reply);
  void ReplyError(const Received& request, StatusCode code, const std::string& text);

  // The oldest received message, waiting up to `timeout`. kTimeout names the peer and
  // `awaiting` (e.g. "ROSTER"); kNetwork if the I/O thread failed.
  Received Receive(std::chrono::milliseconds timeout, const std::string& awaiting);
  // Like Receive, but nullopt instead of kTimeout (polling loops that check a stop flag).
  std::optional<Received> TryReceive(std::chrono::milliseconds timeout);
  // The message whose header.request_id is `request_id`; other messages stay queued.
  Received ReceiveReply(uint64_t request_id, std::chrono::milliseconds timeout,
                        const std::string& awaiting);
  // Drops the reply to `request_id` now or whenever it arrives (after a timed-out wait,
  // so late replies do not pile up).
  void Forget(uint64_t request_id);

  EndpointStats stats() const;

 private:
  struct Outgoing {
    std::chrono::steady_clock::time_point due;
    std::string routing_id;
    std::vector<std::shared_ptr<Frame>> frames;
    std::string what;  // for logs
  };

  void Enqueue(std::vector<Frame> frames, std::string routing_id, std::string what);
  std::optional<Received> Take(const std::function<bool(const Received&)>& match,
                               std::chrono::milliseconds timeout);
  [[noreturn]] void ThrowTimeout(std::chrono::milliseconds timeout, const std::string& awaiting);
  void Wake();
  void IoLoop();
  void ReceiveAvailable();
  void Accept(RawMessage raw);
  void Reject(const Peer& from, const std::string& reason, const Frame* header_frame);
  bool SendDue(std::deque<Outgoing>& queue);

  const Kind kind_;
  const std::string name_;
  const Codec codec_;
  std::unique_ptr<ZmqSocket> socket_;  // used only by the I/O thread once it runs
  std::string address_;
  EventFd wake_;  // Send and Take wake the I/O thread's zmq_poll through it

  mutable std::mutex mu_;
  std::condition_variable received_cv_;
  std::deque<Outgoing> outbox_;  // FIFO; due times never decrease
  std::deque<Received> inbox_;
  std::set<uint64_t> forgotten_;
  EndpointStats stats_;
  int64_t log_count_ = 0;
  std::string io_error_;  // set when the I/O thread failed
  bool stopping_ = false;
  std::chrono::steady_clock::time_point linger_deadline_;
  std::thread io_thread_;
};

}  // namespace dlrm::net
