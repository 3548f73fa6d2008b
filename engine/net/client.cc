#include "engine/net/client.h"

#include <utility>

namespace dlrm::net {

void ThrowRemoteError(const Message& error, const std::string& context) {
  // The decoder admitted only valid, non-OK codes.
  Throw(static_cast<StatusCode>(error.header.error_code()), context, ": ",
        error.header.error_message());
}

Client::Client(const Context& context, const std::string& address, const TransportOptions& options,
               std::string peer_name, int32_t sender_rank)
    : endpoint_(context, Endpoint::kConnect, address, options, std::move(peer_name)),
      sender_rank_(sender_rank) {}

uint64_t Client::Submit(Message request) {
  const uint64_t id = next_id_.fetch_add(1);
  request.header.set_request_id(id);
  if (sender_rank_ >= 0) request.header.set_sender_rank(sender_rank_);
  const MessageType type = request.header.type();
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_[id] = type;
  }
  try {
    endpoint_.Send(std::move(request));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.erase(id);
    throw;
  }
  return id;
}

Message Client::Wait(uint64_t request_id, std::chrono::milliseconds timeout) {
  const std::string request = Outstanding(request_id);
  Message reply = WaitReply(request_id, timeout);
  if (reply.header.type() == ERROR)
    ThrowRemoteError(reply, endpoint_.name() + " (" + endpoint_.address() + ") answered " +
                                request + " with an error");
  return reply;
}

std::string Client::Outstanding(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outstanding_.find(request_id);
  if (it == outstanding_.end())
    ThrowInvalid("request ", request_id, " to ", endpoint_.name(),
                 " is not outstanding (never submitted, or already waited for)");
  return MessageTypeName(it->second) + " #" + std::to_string(request_id);
}

Message Client::WaitReply(uint64_t request_id, std::chrono::milliseconds timeout) {
  const std::string what = "the reply to " + Outstanding(request_id);
  Received reply;
  try {
    reply = endpoint_.ReceiveReply(request_id, timeout, what);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.erase(request_id);
    endpoint_.Forget(request_id);  // a reply after a timeout or an abort is dropped
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.erase(request_id);
  }
  return std::move(reply.message);
}

void Client::Abandon(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (outstanding_.erase(request_id) > 0) endpoint_.Forget(request_id);
}

Message Client::Call(Message request, std::chrono::milliseconds timeout) {
  return Wait(Submit(std::move(request)), timeout);
}

}  // namespace dlrm::net
