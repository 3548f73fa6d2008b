// Request/reply over a connecting endpoint, with any number of requests outstanding.
//
//   net::Client server(context, roster.peers(3).address(), options, "server 3", my_rank);
//   uint64_t a = server.Submit(lookup_for_batch_1);   // returns at once
//   uint64_t b = server.Submit(lookup_for_batch_2);   // both in flight (delays overlap)
//   net::Message reply_a = server.Wait(a, timeout);   // replies matched by request id
//
// Submit assigns each request a fresh request id; the listening side must echo it
// (Endpoint::Reply does). Wait may be called from several threads for different ids.
// Every submitted request should be waited for: a reply nobody takes stays queued
// (a timed-out Wait forgets its reply, so late replies are dropped). Messages that
// answer no request (request id 0) stay in endpoint() for Receive.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/net/endpoint.h"

namespace dlrm::net {

class Client {
 public:
  // `sender_rank` (>= 0) is stamped on every request; -1 leaves it unset.
  Client(const Context& context, const std::string& address, const TransportOptions& options,
         std::string peer_name, int32_t sender_rank = -1);

  // Sends a request; returns its request id. kInvalidArgument for an invalid message.
  uint64_t Submit(Message request);

  // The reply to `request_id`. An ERROR reply is thrown as dlrm::Error with the code the
  // peer sent and its message; kTimeout names the peer and the request; kInvalidArgument
  // for an id that is not outstanding.
  Message Wait(uint64_t request_id, std::chrono::milliseconds timeout);
  // Like Wait, but an ERROR reply is returned instead of thrown (a caller that passes the
  // peer's own words on).
  Message WaitReply(uint64_t request_id, std::chrono::milliseconds timeout);

  // Gives up on an outstanding request: its reply is dropped whenever it comes. No-op for
  // an id that is not outstanding.
  void Abandon(uint64_t request_id);

  // Submit + Wait.
  Message Call(Message request, std::chrono::milliseconds timeout);

  Endpoint& endpoint() { return endpoint_; }

 private:
  // "LOOKUP #12" for an outstanding request; kInvalidArgument for any other id.
  std::string Outstanding(uint64_t request_id);

  Endpoint endpoint_;
  const int32_t sender_rank_;
  std::atomic<uint64_t> next_id_{1};
  std::mutex mu_;
  std::map<uint64_t, MessageType> outstanding_;  // request id -> request type
};

// Throws the dlrm::Error an ERROR message carries, prefixed with `context`.
[[noreturn]] void ThrowRemoteError(const Message& error, const std::string& context);

}  // namespace dlrm::net
