#include "engine/net/auth.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <memory>

#include "engine/core/status.h"
#include "engine/net/options.h"

namespace dlrm::net {
namespace {

// OpenSSL's Poly1305 (AVX2 where the CPU has it: 4.5 GB/s on one core here against
// libsodium's 2.6, which has no AVX2 Poly1305); the same function, so tags are the same.
EVP_MAC* Poly1305() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
  if (mac == nullptr) Throw(StatusCode::kInternal, "OpenSSL has no POLY1305 MAC");
  return mac;
}

struct MacContextFree {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};
using MacContext = std::unique_ptr<EVP_MAC_CTX, MacContextFree>;

void Update(EVP_MAC_CTX* mac, const uint8_t* data, size_t size) {
  if (size > 0 && EVP_MAC_update(mac, data, size) != 1)
    Throw(StatusCode::kInternal, "Poly1305 update failed");
}

void UpdateWithLength(EVP_MAC_CTX* mac, const uint8_t* data, size_t size) {
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(size) >> (8 * i));
  Update(mac, len, sizeof len);
  Update(mac, data, size);
}

}  // namespace

Authenticator::Authenticator(std::string secret) {
  if (secret.size() < kMinSecretBytes)
    ThrowInvalid("the shared secret has ", secret.size(), " bytes, fewer than the minimum ",
                 kMinSecretBytes);
  // Idempotent and thread-safe; picks the fastest implementations for this CPU.
  if (sodium_init() < 0) Throw(StatusCode::kInternal, "libsodium failed to initialize");
  crypto_generichash(key_.data(), key_.size(),
                     reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), nullptr,
                     0);
  sodium_memzero(secret.data(), secret.size());
}

std::array<uint8_t, kAuthMacBytes> Authenticator::Mac(
    const uint8_t* nonce, const uint8_t* header_prefix, size_t header_prefix_size,
    const std::vector<std::vector<uint8_t>>& payloads, size_t first_payload) const {
  static_assert(crypto_stream_xchacha20_NONCEBYTES == kAuthNonceBytes);
  static_assert(crypto_onetimeauth_BYTES == kAuthMacBytes);
  uint8_t one_time_key[crypto_onetimeauth_KEYBYTES];
  crypto_stream_xchacha20(one_time_key, sizeof one_time_key, nonce, key_.data());
  const MacContext context(EVP_MAC_CTX_new(Poly1305()));
  const bool keyed =
      context && EVP_MAC_init(context.get(), one_time_key, sizeof one_time_key, nullptr) == 1;
  sodium_memzero(one_time_key, sizeof one_time_key);
  if (!keyed) Throw(StatusCode::kInternal, "Poly1305 initialization failed");
  UpdateWithLength(context.get(), header_prefix, header_prefix_size);
  for (size_t i = first_payload; i < payloads.size(); ++i)
    UpdateWithLength(context.get(), payloads[i].data(), payloads[i].size());
  std::array<uint8_t, kAuthMacBytes> mac;
  size_t size = 0;
  if (EVP_MAC_final(context.get(), mac.data(), &size, mac.size()) != 1 || size != mac.size())
    Throw(StatusCode::kInternal, "Poly1305 finalization failed");
  return mac;
}

AuthTag Authenticator::Tag(const uint8_t* header_prefix, size_t header_prefix_size,
                           const std::vector<std::vector<uint8_t>>& payloads,
                           size_t first_payload) const {
  AuthTag tag;
  randombytes_buf(tag.data(), kAuthNonceBytes);
  const auto mac = Mac(tag.data(), header_prefix, header_prefix_size, payloads, first_payload);
  std::copy(mac.begin(), mac.end(), tag.begin() + kAuthNonceBytes);
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
  const uint8_t* nonce = header_frame.data() + prefix + 2;
  const auto want = Mac(nonce, header_frame.data(), prefix, payloads, first_payload);
  return crypto_verify_16(want.data(), nonce + kAuthNonceBytes) == 0;
}

}  // namespace dlrm::net
