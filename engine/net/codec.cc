#include "engine/net/codec.h"

#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>

namespace dlrm::net {
namespace {

// The rules on header fields, shared by Encode and Decode; `frames` are the header frame
// and the payload frames that came with it. Returns the first rule broken, or "".
std::string HeaderProblem(const Header& h, const std::vector<Frame>& frames) {
  if (!h.has_type()) return "header type is missing";
  if (h.type() <= 0) return StrCat("header type ", h.type(), " is not a message type (> 0)");
  const size_t num_payloads = frames.size() - 1;
  if (static_cast<size_t>(h.payloads_size()) != num_payloads)
    return StrCat("header describes ", h.payloads_size(), " payloads but ", num_payloads,
                  " payload frames follow");
  for (int i = 0; i < h.payloads_size(); ++i) {
    const PayloadDescriptor& d = h.payloads(i);
    if (!d.has_dtype())
      return EnumFieldProblem(d, PayloadDescriptor::kDtypeFieldNumber,
                              StrCat("payload ", i, " dtype"));
    const int64_t size = DTypeSize(d.dtype());
    if (size == 0) return StrCat("payload ", i, " dtype ", DTypeName(d.dtype()), " is not allowed");
    if (!d.has_count()) return StrCat("payload ", i, " count is missing");
    if (d.count() < 0) return StrCat("payload ", i, " count ", d.count(), " is negative");
    const uint64_t have = frames[i + 1].size();
    // Division, not multiplication: a huge count must not overflow into a match.
    if (have % static_cast<uint64_t>(size) != 0 ||
        have / static_cast<uint64_t>(size) != static_cast<uint64_t>(d.count()))
      return StrCat("payload ", i, " (", DTypeName(d.dtype()), " x ", d.count(), ") needs ",
                    d.count() <= INT64_MAX / size ? std::to_string(d.count() * size) : "too many",
                    " bytes but its frame has ", have);
  }
  if (h.has_sender_rank() && h.sender_rank() < 0)
    return StrCat("sender_rank ", h.sender_rank(), " is negative");
  if (h.has_step() && h.step() < 0) return StrCat("step ", h.step(), " is negative");
  if (h.type() == ERROR) {
    if (!h.has_error_code()) return "ERROR has no error_code";
    if (!IsErrorCode(h.error_code()))
      return StrCat("ERROR error_code ", h.error_code(),
                    " is not a dlrm status code other than OK");
  }
  return "";
}

}  // namespace

void ValidateTransportOptions(const TransportOptions& o) {
  if (o.max_message_bytes < 1024)
    ThrowInvalid("TransportOptions.max_message_bytes ", o.max_message_bytes, " < 1024");
  // (A header larger than max_message_bytes is refused by that limit anyway.)
  if (o.max_header_bytes < 256 || o.max_header_bytes > INT32_MAX)
    ThrowInvalid("TransportOptions.max_header_bytes ", o.max_header_bytes,
                 " must be in [256, 2^31 - 1]");
  if (o.max_frames < 1) ThrowInvalid("TransportOptions.max_frames ", o.max_frames, " < 1");
  if (!o.secret.empty() && o.secret.size() < kMinSecretBytes)
    ThrowInvalid("TransportOptions.secret has ", o.secret.size(), " bytes, fewer than ",
                 kMinSecretBytes);
  if (o.delay_ms < 0 || o.delay_ms > 60000)
    ThrowInvalid("TransportOptions.delay_ms ", o.delay_ms, " must be in [0, 60000]");
  if (o.receive_queue_limit < 1)
    ThrowInvalid("TransportOptions.receive_queue_limit ", o.receive_queue_limit, " < 1");
  if (o.linger_ms < 0) ThrowInvalid("TransportOptions.linger_ms ", o.linger_ms, " < 0");
  if (o.routing_id.size() > kMaxRoutingIdBytes)
    ThrowInvalid("TransportOptions.routing_id has ", o.routing_id.size(), " bytes, more than ",
                 kMaxRoutingIdBytes);
  if (!o.routing_id.empty() && o.routing_id[0] == '\0')
    ThrowInvalid("TransportOptions.routing_id starts with a zero byte (reserved by ZeroMQ)");
}

std::string NewRoutingId() {
  std::random_device random;
  std::uniform_int_distribution<int> byte(0, 255);
  std::string id(kRoutingIdBytes, '\0');
  for (char& c : id) c = static_cast<char>(byte(random));
  if (id[0] == '\0') id[0] = 1;
  return id;
}

Codec::Codec(const TransportOptions& options) : options_(options) {
  ValidateTransportOptions(options_);
  if (!options_.secret.empty()) auth_.emplace(options_.secret);
}

void Codec::CheckEnvelope(int64_t num_frames, int64_t header_bytes, int64_t total_bytes) const {
  if (num_frames < 1)
    Throw(StatusCode::kDataLoss, "malformed message: no frames (a header frame is required)");
  if (num_frames > options_.max_frames)
    Throw(StatusCode::kDataLoss, "malformed message: ", num_frames,
          " frames, more than max_frames ", options_.max_frames);
  if (header_bytes > options_.max_header_bytes)
    Throw(StatusCode::kDataLoss, "malformed message: header frame of ", header_bytes,
          " bytes, more than max_header_bytes ", options_.max_header_bytes);
  if (total_bytes > options_.max_message_bytes)
    Throw(StatusCode::kDataLoss, "malformed message: ", total_bytes,
          " bytes in all, more than max_message_bytes ", options_.max_message_bytes);
}

std::vector<Frame> Codec::Encode(Message message) const {
  Header& h = message.header;
  h.set_version(kWireVersion);
  h.clear_auth_tag();
  h.clear_payloads();
  std::vector<Frame> frames(1 + message.payloads.size());
  int64_t total = 0;
  for (size_t i = 0; i < message.payloads.size(); ++i) {
    PayloadDescriptor* d = h.add_payloads();
    d->set_dtype(message.payloads[i].dtype());
    d->set_count(message.payloads[i].count());
    frames[i + 1] = std::move(message.payloads[i]).TakeBytes();
    total += static_cast<int64_t>(frames[i + 1].size());
  }
  const std::string problem = HeaderProblem(h, frames);
  if (!problem.empty()) ThrowInvalid("cannot send ", MessageTypeName(h.type()), ": ", problem);
  const size_t header_size = h.ByteSizeLong();
  const size_t trailer = auth_ ? kAuthTrailerBytes : 0;
  frames[0].resize(header_size + trailer);
  h.SerializeWithCachedSizesToArray(frames[0].data());
  if (auth_) {
    const AuthTag tag = auth_->Tag(frames[0].data(), header_size, frames, 1);
    const Frame t = Authenticator::Trailer(tag);
    std::memcpy(frames[0].data() + header_size, t.data(), t.size());
  }
  total += static_cast<int64_t>(frames[0].size());
  try {
    CheckEnvelope(static_cast<int64_t>(frames.size()), static_cast<int64_t>(frames[0].size()),
                  total);
  } catch (const Error& e) {
    ThrowInvalid("cannot send ", MessageTypeName(h.type()),
                 ": the receiver would reject it: ", e.what());
  }
  return frames;
}

Message Codec::Decode(std::vector<Frame> frames) const {
  int64_t total = 0;
  for (const Frame& f : frames) total += static_cast<int64_t>(f.size());
  CheckEnvelope(static_cast<int64_t>(frames.size()),
                frames.empty() ? 0 : static_cast<int64_t>(frames[0].size()), total);
  Message m;
  Header& h = m.header;
  // The size was checked above, so the cast cannot truncate.
  if (!h.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())))
    Throw(StatusCode::kDataLoss, "malformed message: header frame (", frames[0].size(),
          " bytes) is not a valid dlrm.net.Header");
  if (!h.has_version())
    Throw(StatusCode::kDataLoss,
          "malformed message: ", EnumFieldProblem(h, Header::kVersionFieldNumber, "header version"),
          " (this build speaks version ", static_cast<int>(kWireVersion), ")");
  if (h.version() != kWireVersion)
    Throw(StatusCode::kDataLoss, "malformed message: header version ",
          WireVersion_Name(h.version()), " is not supported (this build speaks version ",
          static_cast<int>(kWireVersion), ")");
  if (auth_) {
    if (!h.has_auth_tag())
      Throw(StatusCode::kDataLoss,
            "unauthenticated message: it has no auth tag but this "
            "endpoint requires one (is DLRM_SECRET set on the sender?)");
    if (!auth_->Verify(frames[0], frames, 1))
      Throw(StatusCode::kDataLoss,
            "unauthenticated message: the auth tag does not match (a "
            "different DLRM_SECRET, or the message was altered)");
  } else if (h.has_auth_tag()) {
    Throw(StatusCode::kDataLoss,
          "unexpected auth tag: the message is authenticated but this "
          "endpoint has no secret (is DLRM_SECRET set here?)");
  }
  const std::string problem = HeaderProblem(h, frames);
  if (!problem.empty()) Throw(StatusCode::kDataLoss, "malformed message: ", problem);
  h.clear_auth_tag();
  m.payloads.reserve(frames.size() - 1);
  for (size_t i = 1; i < frames.size(); ++i) {
    const PayloadDescriptor& d = h.payloads(static_cast<int>(i - 1));
    m.payloads.push_back(Payload::FromBytes(d.dtype(), d.count(), std::move(frames[i])));
  }
  return m;
}

}  // namespace dlrm::net
