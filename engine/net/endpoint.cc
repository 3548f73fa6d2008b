#include "engine/net/endpoint.h"

#include <zmq.h>

#include <algorithm>
#include <utility>

#include "engine/core/log.h"
#include "engine/net/abort.h"
#include "engine/net/zmq_socket.h"

namespace dlrm::net {
namespace {

using Clock = std::chrono::steady_clock;

// Messages taken off the socket per poll round, so due sends are not starved.
constexpr int kReceiveBurst = 64;
// Retry interval for a send ZeroMQ refused with EAGAIN.
constexpr int kBlockedRetryMs = 1;

}  // namespace

Endpoint::Endpoint(const Context& context, Kind kind, const std::string& address,
                   const TransportOptions& options, std::string name)
    : kind_(kind), name_(std::move(name)), codec_(options) {
  socket_ = std::make_unique<ZmqSocket>(
      context, kind == kListen ? ZmqSocket::kRouter : ZmqSocket::kDealer, options);
  if (kind == kListen) {
    address_ = socket_->Bind(address);
  } else {
    socket_->Connect(address);
    address_ = address;
  }
  // The socket is handed to the I/O thread here; thread creation orders the accesses.
  io_thread_ = std::thread([this] { IoLoop(); });
}

Endpoint::~Endpoint() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    linger_deadline_ = Clock::now() + std::chrono::milliseconds(codec_.options().linger_ms);
  }
  wake_.Signal();
  io_thread_.join();
}

void Endpoint::Send(Message message, const Peer& to) {
  if (kind_ == kListen && to.routing_id.empty())
    ThrowInvalid(name_, ": a listening endpoint sends only to a peer that sent to it (",
                 MessageTypeName(message.header.type()), " has no recipient)");
  if (kind_ == kConnect && !to.routing_id.empty())
    ThrowInvalid(name_, ": a connecting endpoint sends to its one peer; `to` must be empty");
  std::string what =
      MessageTypeName(message.header.type()) + " #" + std::to_string(message.header.request_id());
  Enqueue(codec_.Encode(std::move(message)), to.routing_id, std::move(what));
}

void Endpoint::Reply(const Received& request, Message reply) {
  reply.header.set_request_id(request.message.header.request_id());
  Send(std::move(reply), request.from);
}

void Endpoint::ReplyError(const Received& request, StatusCode code, const std::string& text) {
  Send(MakeErrorMessage(code, text, request.message.header.request_id()), request.from);
}

void Endpoint::Enqueue(std::vector<Frame> frames, std::string routing_id, std::string what) {
  Outgoing out;
  out.routing_id = std::move(routing_id);
  out.what = std::move(what);
  out.frames.reserve(frames.size());
  for (Frame& f : frames) out.frames.push_back(std::make_shared<Frame>(std::move(f)));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!io_error_.empty())
      Throw(StatusCode::kNetwork, name_, " (", address_, "): transport failed: ", io_error_);
    // Stamped under the lock, so due times never decrease along the queue.
    out.due = Clock::now() + std::chrono::milliseconds(codec_.options().delay_ms);
    outbox_.push_back(std::move(out));
  }
  wake_.Signal();
}

std::optional<Received> Endpoint::Take(const std::function<bool(const Received&)>& match,
                                       std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const AbortSignal* abort = codec_.options().abort.get();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!io_error_.empty())
      Throw(StatusCode::kNetwork, name_, " (", address_, "): transport failed: ", io_error_);
    if (abort != nullptr && abort->raised()) {
      lock.unlock();
      abort->ThrowIfRaised(" (" + name_ + " at " + address_ + " stopped waiting)");
    }
    auto it = std::find_if(inbox_.begin(), inbox_.end(), match);
    if (it != inbox_.end()) {
      const bool was_full =
          inbox_.size() >= static_cast<size_t>(codec_.options().receive_queue_limit);
      Received r = std::move(*it);
      inbox_.erase(it);
      lock.unlock();
      if (was_full) wake_.Signal();  // the I/O thread stopped reading; resume
      return r;
    }
    // With a signal to watch, sleep at most one poll interval at a time.
    const auto until =
        abort == nullptr ? deadline : std::min(deadline, Clock::now() + kAbortPollInterval);
    if (received_cv_.wait_until(lock, until) == std::cv_status::timeout &&
        Clock::now() >= deadline) {
      // One last look: a message may have come in just at the deadline.
      it = std::find_if(inbox_.begin(), inbox_.end(), match);
      if (it == inbox_.end()) return std::nullopt;
    }
  }
}

void Endpoint::ThrowTimeout(std::chrono::milliseconds timeout, const std::string& awaiting) {
  EndpointStats s = stats();
  std::string from = kind_ == kListen ? "any peer of " + name_ + " (listening on " + address_ + ")"
                                      : name_ + " at " + address_;
  std::string rejected;
  if (s.rejected > 0)
    rejected = "; this endpoint has rejected " + std::to_string(s.rejected) +
               " malformed or unauthenticated messages, the last: " + s.last_rejection;
  if (s.send_failures > 0) rejected += "; last send failure: " + s.last_send_failure;
  Throw(StatusCode::kTimeout, "timed out after ", timeout.count(), " ms waiting for ", awaiting,
        " from ", from, rejected);
}

Received Endpoint::Receive(std::chrono::milliseconds timeout, const std::string& awaiting) {
  auto r = Take([](const Received&) { return true; }, timeout);
  if (!r) ThrowTimeout(timeout, awaiting);
  return std::move(*r);
}

std::optional<Received> Endpoint::TryReceive(std::chrono::milliseconds timeout) {
  return Take([](const Received&) { return true; }, timeout);
}

Received Endpoint::ReceiveReply(uint64_t request_id, std::chrono::milliseconds timeout,
                                const std::string& awaiting) {
  auto r =
      Take([request_id](const Received& m) { return m.message.header.request_id() == request_id; },
           timeout);
  if (!r) ThrowTimeout(timeout, awaiting);
  return std::move(*r);
}

void Endpoint::Forget(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(inbox_.begin(), inbox_.end(), [&](const Received& m) {
    return m.message.header.request_id() == request_id;
  });
  if (it != inbox_.end()) {
    inbox_.erase(it);
  } else {
    forgotten_.insert(request_id);
  }
}

EndpointStats Endpoint::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// ---- the I/O thread -------------------------------------------------------------------

void Endpoint::IoLoop() {
  std::deque<Outgoing> queue;  // taken from outbox_, same order
  try {
    for (;;) {
      bool stopping;
      bool inbox_full;
      Clock::time_point linger_deadline;
      {
        std::lock_guard<std::mutex> lock(mu_);
        while (!outbox_.empty()) {
          queue.push_back(std::move(outbox_.front()));
          outbox_.pop_front();
        }
        stopping = stopping_;
        linger_deadline = linger_deadline_;
        inbox_full = inbox_.size() >= static_cast<size_t>(codec_.options().receive_queue_limit);
      }
      const bool blocked = !SendDue(queue);
      const auto now = Clock::now();
      if (stopping && (queue.empty() || now >= linger_deadline)) {
        if (!queue.empty())
          DLRM_LOG(kWarning) << name_ << ": dropped " << queue.size()
                             << " unsent messages at close (linger_ms passed)";
        return;
      }
      long timeout_ms = -1;
      if (blocked) {
        timeout_ms = kBlockedRetryMs;
      } else if (!queue.empty()) {
        // Round up: waking early would only spin.
        const auto wait = std::chrono::ceil<std::chrono::milliseconds>(queue.front().due - now);
        timeout_ms = std::max<long>(0, static_cast<long>(wait.count()));
      }
      if (stopping) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(linger_deadline - now).count();
        timeout_ms = timeout_ms < 0 ? left : std::min<long>(timeout_ms, left);
      }
      zmq_pollitem_t items[2] = {
          {socket_->raw(), 0, static_cast<short>(inbox_full || stopping ? 0 : ZMQ_POLLIN), 0},
          {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
      if (zmq_poll(items, 2, timeout_ms) < 0) {
        if (zmq_errno() == EINTR) continue;
        Throw(StatusCode::kNetwork, "zmq_poll: ", zmq_strerror(zmq_errno()));
      }
      if (items[1].revents & ZMQ_POLLIN) wake_.Drain();
      if (items[0].revents & ZMQ_POLLIN) ReceiveAvailable();
    }
  } catch (const std::exception& e) {
    DLRM_LOG(kError) << name_ << " (" << address_ << "): transport I/O thread failed: " << e.what();
    std::lock_guard<std::mutex> lock(mu_);
    io_error_ = e.what();
    received_cv_.notify_all();
  }
}

// Sends every queued message that is due. False when ZeroMQ refused one for now.
bool Endpoint::SendDue(std::deque<Outgoing>& queue) {
  while (!queue.empty()) {
    Outgoing& out = queue.front();
    // At close, queued messages go as soon as they are due; not yet due ones wait.
    if (out.due > Clock::now()) return true;
    bool sent = false;
    try {
      sent = socket_->TrySend(out.routing_id.empty() ? nullptr : &out.routing_id, out.frames);
    } catch (const Error& e) {
      // A recipient that has gone (EHOSTUNREACH) must not stop the endpoint.
      int64_t failures;
      {
        std::lock_guard<std::mutex> lock(mu_);
        failures = ++stats_.send_failures;
        stats_.last_send_failure = out.what + ": " + e.what();
      }
      if (ShouldLogOccurrence(failures))
        DLRM_LOG(kWarning) << name_ << ": could not send " << out.what << ": " << e.what() << " ["
                           << failures << " failed sends so far]";
      queue.pop_front();
      continue;
    }
    if (!sent) return false;
    queue.pop_front();
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.sent;
  }
  return true;
}

void Endpoint::ReceiveAvailable() {
  for (int i = 0; i < kReceiveBurst; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (inbox_.size() >= static_cast<size_t>(codec_.options().receive_queue_limit)) return;
    }
    std::optional<RawMessage> raw = socket_->TryReceive();
    if (!raw) return;
    Accept(std::move(*raw));
  }
}

void Endpoint::Accept(RawMessage raw) {
  Peer from{std::move(raw.routing_id), std::move(raw.peer_address)};
  // Kept for the ERROR answer: the decoder consumes the frames.
  Frame header_copy;
  if (!raw.frames.empty()) header_copy = raw.frames[0];
  try {
    if (raw.overflow) codec_.CheckEnvelope(raw.num_frames, raw.header_bytes, raw.total_bytes);
    Message m = codec_.Decode(std::move(raw.frames));
    std::lock_guard<std::mutex> lock(mu_);
    auto forgotten = forgotten_.find(m.header.request_id());
    if (forgotten != forgotten_.end()) {
      forgotten_.erase(forgotten);
      return;
    }
    ++stats_.received;
    inbox_.push_back(Received{std::move(m), std::move(from)});
    received_cv_.notify_all();
  } catch (const Error& e) {
    Reject(from, e.what(), header_copy.empty() ? nullptr : &header_copy);
  }
}

void Endpoint::Reject(const Peer& from, const std::string& reason, const Frame* header_frame) {
  int64_t count;
  {
    std::lock_guard<std::mutex> lock(mu_);
    count = ++stats_.rejected;
    stats_.last_rejection = reason;
  }
  if (ShouldLogOccurrence(count)) {
    DLRM_LOG(kWarning) << name_ << " (" << address_ << "): rejected a message from "
                       << (from.address.empty() ? "a peer" : from.address) << ": " << reason << " ["
                       << count << " rejected so far]";
  }
  if (kind_ != kListen || from.routing_id.empty()) return;
  // Answer with the request id if the header can be read at all; never answer an ERROR,
  // so two endpoints cannot bounce errors back and forth.
  uint64_t request_id = 0;
  Header h;
  if (header_frame != nullptr &&
      static_cast<int64_t>(header_frame->size()) <= codec_.options().max_header_bytes &&
      h.ParseFromArray(header_frame->data(), static_cast<int>(header_frame->size()))) {
    if (h.type() == ERROR) return;
    request_id = h.request_id();
  }
  Message error = MakeErrorMessage(StatusCode::kDataLoss,
                                   name_ + " rejected the message: " + reason, request_id);
  std::string what = "ERROR #" + std::to_string(request_id);
  try {
    Enqueue(codec_.Encode(std::move(error)), from.routing_id, std::move(what));
  } catch (const Error& e) {
    DLRM_LOG(kWarning) << name_ << ": could not answer a rejected message: " << e.what();
  }
}

void RankLinks::Set(int32_t rank, std::string link) {
  DLRM_INTERNAL_CHECK(rank >= 0 && rank < size());
  links_[static_cast<size_t>(rank)] = std::move(link);
}

bool RankLinks::NamesARank(const Received& r) const {
  const Header& h = r.message.header;
  return h.has_sender_rank() && h.sender_rank() >= 0 && h.sender_rank() < size();
}

std::optional<int32_t> RankLinks::RankOf(const Received& r) const {
  if (!NamesARank(r)) return std::nullopt;
  const int32_t rank = r.message.header.sender_rank();
  const std::string& link = links_[static_cast<size_t>(rank)];
  if (link.empty() || r.from.routing_id != link) return std::nullopt;
  return rank;
}

}  // namespace dlrm::net
