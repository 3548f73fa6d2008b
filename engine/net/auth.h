// Message authentication with a shared secret over the header bytes that precede the
// tag and every payload: Poly1305 under a key used for one message only, the first 32
// bytes of XChaCha20's keystream for a random 24-byte nonce under a key derived from the
// secret (BLAKE2b-256 of it): the ChaCha20-Poly1305 construction's MAC. libsodium (which
// libzmq already depends on) derives the keys and nonces; OpenSSL's libcrypto computes
// Poly1305 (6.0 GB/s on one core here with AVX2, libsodium's 2.3, HMAC-SHA256 0.155), so
// authenticating the pooled embeddings and gradients of a step costs a few percent
// instead of doubling it (issue 17, finding 10). The tag is the nonce followed by the
// 16-byte Poly1305 tag.
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

inline constexpr size_t kAuthNonceBytes = 24;  // XChaCha20's: random ones never repeat
inline constexpr size_t kAuthMacBytes = 16;    // Poly1305's
inline constexpr size_t kAuthTagBytes = kAuthNonceBytes + kAuthMacBytes;
// Encoded Header.auth_tag field: key byte (15 << 3 | 2), length byte, tag.
inline constexpr size_t kAuthTrailerBytes = 2 + kAuthTagBytes;
inline constexpr uint8_t kAuthTagKey = (15 << 3) | 2;

using AuthTag = std::array<uint8_t, kAuthTagBytes>;

class Authenticator {
 public:
  // kInvalidArgument for a secret shorter than kMinSecretBytes (the value is not echoed).
  explicit Authenticator(std::string secret);

  // A tag over `header_prefix` (the header serialized without a tag) and `payloads`,
  // under a fresh random nonce. Thread-safe.
  AuthTag Tag(const uint8_t* header_prefix, size_t header_prefix_size,
              const std::vector<std::vector<uint8_t>>& payloads, size_t first_payload = 0) const;

  // The trailer to append to the serialized header.
  static std::vector<uint8_t> Trailer(const AuthTag& tag);

  // Whether `header_frame` ends in a trailer whose tag authenticates the rest of it and
  // the payloads; constant time in the tag comparison.
  bool Verify(const std::vector<uint8_t>& header_frame,
              const std::vector<std::vector<uint8_t>>& payloads, size_t first_payload = 0) const;

 private:
  // The Poly1305 tag of the parts under `nonce`'s one-message key.
  std::array<uint8_t, kAuthMacBytes> Mac(const uint8_t* nonce, const uint8_t* header_prefix,
                                         size_t header_prefix_size,
                                         const std::vector<std::vector<uint8_t>>& payloads,
                                         size_t first_payload) const;

  std::array<uint8_t, 32> key_;  // BLAKE2b-256 of the secret
};

}  // namespace dlrm::net
