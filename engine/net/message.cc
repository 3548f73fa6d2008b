#include "engine/net/message.h"

#include <google/protobuf/unknown_field_set.h>

#include <limits>
#include <sstream>

namespace dlrm::net {
namespace {

// libprotobuf creates UnknownFieldSet's default instance on first use, behind a static
// guard whose fast path ThreadSanitizer cannot see (the library is not instrumented), so
// two I/O threads decoding their first unknown enum value at once looked like a race.
// Created while the program starts, before any thread, it is ordered before every read.
[[maybe_unused]] const google::protobuf::UnknownFieldSet& kNoUnknownFields =
    google::protobuf::UnknownFieldSet::default_instance();

}  // namespace

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case PayloadDescriptor::F32: return 4;
    case PayloadDescriptor::F64: return 8;
    case PayloadDescriptor::I32: return 4;
    case PayloadDescriptor::I64: return 8;
    case PayloadDescriptor::U8: return 1;
    case PayloadDescriptor::U16: return 2;
    case PayloadDescriptor::U32: return 4;
    default: return 0;
  }
}

std::string DTypeName(DType dtype) {
  if (!PayloadDescriptor::DType_IsValid(dtype))
    return "DTYPE_" + std::to_string(static_cast<int>(dtype));
  return PayloadDescriptor::DType_Name(dtype);
}

size_t Payload::CheckedSize(DType dtype, int64_t count) {
  const int64_t size = DTypeSize(dtype);
  if (size == 0) ThrowInvalid("payload dtype ", DTypeName(dtype), " is not a known dtype");
  if (count < 0) ThrowInvalid("payload count ", count, " is negative");
  if (count > std::numeric_limits<int64_t>::max() / size)
    ThrowInvalid("payload of ", count, " x ", DTypeName(dtype), " overflows");
  return static_cast<size_t>(count * size);
}

Payload Payload::FromBytes(DType dtype, int64_t count, std::vector<uint8_t> bytes) {
  const size_t want = CheckedSize(dtype, count);
  if (bytes.size() != want)
    ThrowInvalid("payload ", DTypeName(dtype), " x ", count, " needs ", want, " bytes, got ",
                 bytes.size());
  Payload p;
  p.dtype_ = dtype;
  p.count_ = count;
  p.bytes_ = std::move(bytes);
  return p;
}

void Payload::CheckType(DType wanted) const {
  if (dtype_ != wanted)
    ThrowInvalid("payload holds ", DTypeName(dtype_), ", read as ", DTypeName(wanted));
}

Message MakeMessage(MessageType type) {
  Message m;
  m.header.set_version(kWireVersion);
  m.header.set_type(type);
  return m;
}

Message MakeErrorMessage(StatusCode code, const std::string& text, uint64_t request_id) {
  DLRM_INTERNAL_CHECK(code != StatusCode::kOk);
  Message m = MakeMessage(ERROR);
  m.header.set_error_code(static_cast<int32_t>(code));
  m.header.set_error_message(text);
  m.header.set_request_id(request_id);
  return m;
}

void SetBody(const google::protobuf::Message& body, Message* message) {
  message->header.set_body(body.SerializeAsString());
}

void ParseBody(const Message& message, google::protobuf::Message* body) {
  const Header& h = message.header;
  if (!h.has_body())
    Throw(StatusCode::kDataLoss, MessageTypeName(h.type()), " has no body (a ", body->GetTypeName(),
          ")");
  if (!body->ParseFromString(h.body()))
    Throw(StatusCode::kDataLoss, MessageTypeName(h.type()), " body (", h.body().size(),
          " bytes) is not a valid ", body->GetTypeName());
}

std::string EnumFieldProblem(const google::protobuf::Message& m, int field_number,
                             const std::string& what) {
  const auto& unknown = m.GetReflection()->GetUnknownFields(m);
  for (int i = unknown.field_count() - 1; i >= 0; --i) {
    const auto& f = unknown.field(i);
    if (f.number() == field_number && f.type() == google::protobuf::UnknownField::TYPE_VARINT)
      return what + " " + std::to_string(static_cast<int64_t>(f.varint())) +
             " is not a known value";
  }
  return what + " is missing";
}

std::string DescribeMessage(const Message& message) {
  const Header& h = message.header;
  std::ostringstream os;
  os << MessageTypeName(h.type()) << " #" << h.request_id();
  if (h.has_sender_rank()) os << " from rank " << h.sender_rank();
  if (h.has_step()) os << ", step " << h.step();
  os << ", " << message.payloads.size() << " payloads";
  if (!message.payloads.empty()) {
    os << " (";
    for (size_t i = 0; i < message.payloads.size(); ++i)
      os << (i ? ", " : "") << DTypeName(message.payloads[i].dtype()) << " x "
         << message.payloads[i].count();
    os << ")";
  }
  if (h.type() == ERROR)
    os << ": " << StatusCodeName(static_cast<StatusCode>(h.error_code())) << " "
       << h.error_message();
  return os.str();
}

}  // namespace dlrm::net
