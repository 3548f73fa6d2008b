// Message authentication with a shared secret: HMAC-SHA256 (libsodium, which libzmq
// already depends on) over the header bytes that precede the tag and every payload.
//
// The tag travels in the header as its last field (Header.auth_tag, field 15): the sender
// serializes the header without a tag, computes the tag, and appends the encoded field;
// the receiver authenticates exactly the bytes before that trailer. Nothing is ever
// re-serialized, so the check does not depend on protobuf producing canonical bytes.
// Every part enters the MAC behind its 8-byte length, so bytes cannot be moved between
// frames without changing the tag. The tags are compared in constant time.
// No confidentiality and no replay protection: see docs/DESIGN.md "Transport".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dlrm::net {

inline constexpr size_t kAuthTagBytes = 32;
// Encoded Header.auth_tag field: key byte (15 << 3 | 2), length byte, tag.
inline constexpr size_t kAuthTrailerBytes = 2 + kAuthTagBytes;
inline constexpr uint8_t kAuthTagKey = (15 << 3) | 2;

using AuthTag = std::array<uint8_t, kAuthTagBytes>;

class Authenticator {
 public:
  // kInvalidArgument for a secret shorter than kMinSecretBytes (the value is not echoed).
  explicit Authenticator(std::string secret);

  // The tag over `header_prefix` (the header serialized without a tag) and `payloads`.
  AuthTag Tag(const uint8_t* header_prefix, size_t header_prefix_size,
              const std::vector<std::vector<uint8_t>>& payloads, size_t first_payload = 0) const;

  // The trailer to append to the serialized header.
  static std::vector<uint8_t> Trailer(const AuthTag& tag);

  // Whether `header_frame` ends in a trailer whose tag authenticates the rest of it and
  // the payloads; constant time in the tag comparison.
  bool Verify(const std::vector<uint8_t>& header_frame,
              const std::vector<std::vector<uint8_t>>& payloads, size_t first_payload = 0) const;

 private:
  std::string secret_;
};

}  // namespace dlrm::net
