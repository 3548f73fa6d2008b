#include "engine/net/auth.h"

#include <sodium.h>

#include "engine/core/status.h"
#include "engine/net/options.h"

namespace dlrm::net {
namespace {

void UpdateWithLength(crypto_auth_hmacsha256_state* state, const uint8_t* data, size_t size) {
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(size) >> (8 * i));
  crypto_auth_hmacsha256_update(state, len, sizeof len);
  if (size > 0) crypto_auth_hmacsha256_update(state, data, size);
}

}  // namespace

Authenticator::Authenticator(std::string secret) : secret_(std::move(secret)) {
  if (secret_.size() < kMinSecretBytes)
    ThrowInvalid("the shared secret has ", secret_.size(), " bytes, fewer than the minimum ",
                 kMinSecretBytes);
  // Idempotent and thread-safe; picks the fastest SHA-256 implementation.
  if (sodium_init() < 0) Throw(StatusCode::kInternal, "libsodium failed to initialize");
}

AuthTag Authenticator::Tag(const uint8_t* header_prefix, size_t header_prefix_size,
                           const std::vector<std::vector<uint8_t>>& payloads,
                           size_t first_payload) const {
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(secret_.data()),
                              secret_.size());
  UpdateWithLength(&state, header_prefix, header_prefix_size);
  for (size_t i = first_payload; i < payloads.size(); ++i)
    UpdateWithLength(&state, payloads[i].data(), payloads[i].size());
  AuthTag tag;
  crypto_auth_hmacsha256_final(&state, tag.data());
  sodium_memzero(&state, sizeof state);
  return tag;
}

std::vector<uint8_t> Authenticator::Trailer(const AuthTag& tag) {
  std::vector<uint8_t> out;
  out.reserve(kAuthTrailerBytes);
  out.push_back(kAuthTagKey);
  out.push_back(static_cast<uint8_t>(kAuthTagBytes));
  out.insert(out.end(), tag.begin(), tag.end());
  return out;
}

bool Authenticator::Verify(const std::vector<uint8_t>& header_frame,
                           const std::vector<std::vector<uint8_t>>& payloads,
                           size_t first_payload) const {
  if (header_frame.size() < kAuthTrailerBytes) return false;
  const size_t prefix = header_frame.size() - kAuthTrailerBytes;
  if (header_frame[prefix] != kAuthTagKey || header_frame[prefix + 1] != kAuthTagBytes)
    return false;
  const AuthTag want = Tag(header_frame.data(), prefix, payloads, first_payload);
  return crypto_verify_32(want.data(), header_frame.data() + prefix + 2) == 0;
}

}  // namespace dlrm::net
