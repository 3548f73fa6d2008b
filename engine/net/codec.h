// Message <-> ZeroMQ multipart frames: [serialized Header] [payload 0] ... [payload N-1].
//
// Decode is the security boundary of the transport: every received message passes
// through it before anything else looks at it. It checks sizes before it trusts them
// (frame count, header size, total size, each payload exactly count * dtype size), enum
// values, signs, ERROR's fields and, with a secret, the auth tag. It allocates nothing beyond the
// frames it was handed, and on any violation throws kDataLoss naming the rule and the offending
// value. What a type's body, step and payloads must hold is checked by the layer that defines the
// type (cluster/messages.h, ps/messages.h), also with kDataLoss. Encode applies the same rules to
// outgoing messages (kInvalidArgument), so a sender learns of a bad message at once
// instead of from a peer that silently drops it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/net/auth.h"
#include "engine/net/message.h"
#include "engine/net/options.h"

namespace dlrm::net {

using Frame = std::vector<uint8_t>;

class Codec {
 public:
  // kInvalidArgument for invalid options (ValidateTransportOptions).
  explicit Codec(const TransportOptions& options);

  // Fills the header's version and payload descriptors, moves the payload buffers into
  // their frames (no copy) and, with a secret, appends the auth tag.
  std::vector<Frame> Encode(Message message) const;

  // Never crashes on any input, and the same input always gives the same result.
  Message Decode(std::vector<Frame> frames) const;

  // The frame-count and size rules alone, for a receiver that stopped keeping frames of a
  // message that already broke them (it still has to drain the rest from the socket).
  void CheckEnvelope(int64_t num_frames, int64_t header_bytes, int64_t total_bytes) const;

  const TransportOptions& options() const { return options_; }

 private:
  TransportOptions options_;
  std::optional<Authenticator> auth_;
};

}  // namespace dlrm::net
