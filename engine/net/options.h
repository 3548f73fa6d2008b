// Limits and behaviour of one transport endpoint (engine/net/endpoint.h). The limits are
// what the decoder enforces on every received message: nothing a peer sends can make an
// endpoint hold more than about max_message_bytes per queued message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dlrm::net {

class AbortSignal;  // abort.h

struct TransportOptions {
  // All frames of one message together, header included. Also the ZeroMQ per-frame cap
  // (ZMQ_MAXMSGSIZE): a peer sending a larger frame is disconnected by ZeroMQ.
  int64_t max_message_bytes = int64_t{256} << 20;
  // The serialized header alone (rosters of large clusters are its biggest users).
  int64_t max_header_bytes = int64_t{4} << 20;
  // Header frame + payload frames.
  int32_t max_frames = 1 + 1024;
  // Shared secret for the message tags (auth.h); empty: no authentication. Every endpoint
  // of a cluster must use the same value (DLRM_SECRET). At least kMinSecretBytes long.
  std::string secret;
  // Added one-way propagation delay of every message this endpoint sends (benchmarks):
  // a message leaves delay_ms after Send returned; Send itself never waits.
  int64_t delay_ms = 0;
  // Decoded messages an endpoint keeps for Receive; when full it stops reading its
  // socket, and ZeroMQ's receive high-water mark (set to the same number) pushes back.
  int32_t receive_queue_limit = 4096;
  // On destruction, how long queued messages (delayed ones included) may still take to
  // leave before they are dropped.
  int64_t linger_ms = 1000;
  // The identity a connecting endpoint presents to the listener (ZMQ_ROUTING_ID): what
  // Received::from.routing_id says there. Empty: ZeroMQ picks one per connection. A job
  // member gives all its connections one random id (NewRoutingId), announced in the
  // roster, so that listeners accept a rank's messages only from that rank's connections.
  // At most kMaxRoutingIdBytes, not starting with a zero byte (ZeroMQ reserves those).
  std::string routing_id;
  // When set and raised, every wait of the endpoint fails at once with the signal's
  // error (abort.h): how a job member stops waiting on peers once the job is over.
  std::shared_ptr<const AbortSignal> abort;
};

inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxRoutingIdBytes = 255;
inline constexpr size_t kRoutingIdBytes = 16;

// kRoutingIdBytes random bytes (std::random_device), the first one non-zero.
std::string NewRoutingId();

// Throws kInvalidArgument naming the first field out of range.
void ValidateTransportOptions(const TransportOptions& options);

}  // namespace dlrm::net
