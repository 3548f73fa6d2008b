// A transport message: a protobuf header plus raw payload arrays (see wire.proto).
//
// Payloads are little-endian arrays of one dtype. Their descriptors in the header are
// derived from `Message::payloads` by the encoder, so the two can never disagree on the
// sending side; the decoder checks that they agree on the receiving side.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/status.h"
#include "engine/net/message_types.h"
#include "engine/net/wire.pb.h"

namespace dlrm::net {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "payloads travel as raw little-endian arrays: a big-endian host needs byte "
              "swapping in Payload");

using DType = PayloadDescriptor::DType;

// Bytes per element; 0 for DTYPE_UNSPECIFIED or a value outside the enum.
int64_t DTypeSize(DType dtype);
// "F32", ...; "DTYPE_<n>" for a value outside the enum.
std::string DTypeName(DType dtype);

// The payload dtype of a C++ element type.
template <typename T>
struct DTypeOf;
#define DLRM_NET_DTYPE_OF(type, dtype)                       \
  template <>                                                \
  struct DTypeOf<type> {                                     \
    static constexpr DType value = PayloadDescriptor::dtype; \
  }
DLRM_NET_DTYPE_OF(float, F32);
DLRM_NET_DTYPE_OF(double, F64);
DLRM_NET_DTYPE_OF(int32_t, I32);
DLRM_NET_DTYPE_OF(int64_t, I64);
DLRM_NET_DTYPE_OF(uint8_t, U8);
DLRM_NET_DTYPE_OF(uint16_t, U16);
DLRM_NET_DTYPE_OF(uint32_t, U32);
#undef DLRM_NET_DTYPE_OF

// One raw array. The storage comes from operator new, so it is aligned for every dtype
// and typed pointers into it are valid.
class Payload {
 public:
  Payload() = default;  // an empty U8 array

  // Copies `count` elements, in one pass (not zero-filled first: payloads reach megabytes).
  template <typename T>
  static Payload Copy(const T* data, int64_t count) {
    Payload p;
    p.dtype_ = DTypeOf<T>::value;
    p.count_ = count;
    const size_t size = CheckedSize(p.dtype_, count);
    if (size > 0) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(data);
      p.bytes_.assign(bytes, bytes + size);
    }
    return p;
  }
  template <typename T>
  static Payload Copy(const std::vector<T>& values) {
    return Copy(values.data(), static_cast<int64_t>(values.size()));
  }
  // `count` zeros, to be filled in place through mutable_data<T>() (no second copy).
  // kInvalidArgument for a negative count or one whose size overflows.
  template <typename T>
  static Payload Zeros(int64_t count) {
    Payload p;
    p.dtype_ = DTypeOf<T>::value;
    p.count_ = count;
    p.bytes_.resize(CheckedSize(p.dtype_, count));
    return p;
  }
  // Adopts bytes (no copy); kInvalidArgument unless bytes.size() == count * size(dtype).
  static Payload FromBytes(DType dtype, int64_t count, std::vector<uint8_t> bytes);

  DType dtype() const { return dtype_; }
  int64_t count() const { return count_; }
  size_t size_bytes() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  // Hands the storage over (the encoder sends it without copying).
  std::vector<uint8_t> TakeBytes() && { return std::move(bytes_); }

  // Typed access; kInvalidArgument when T is not the payload's dtype.
  template <typename T>
  const T* data() const {
    CheckType(DTypeOf<T>::value);
    return reinterpret_cast<const T*>(bytes_.data());
  }
  template <typename T>
  T* mutable_data() {
    CheckType(DTypeOf<T>::value);
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  std::vector<T> ToVector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + count_);
  }

  bool operator==(const Payload& other) const {
    return dtype_ == other.dtype_ && count_ == other.count_ && bytes_ == other.bytes_;
  }

 private:
  static size_t CheckedSize(DType dtype, int64_t count);
  void CheckType(DType wanted) const;

  DType dtype_ = PayloadDescriptor::U8;
  int64_t count_ = 0;
  std::vector<uint8_t> bytes_;
};

struct Message {
  Header header;
  std::vector<Payload> payloads;
};

// The version this build speaks and accepts (wire.proto says what each one changed).
inline constexpr WireVersion kWireVersion = WIRE_VERSION_5;

// A message of `type` (version set, nothing else).
Message MakeMessage(MessageType type);
// An ERROR message answering request `request_id`; `code` must not be kOk.
Message MakeErrorMessage(StatusCode code, const std::string& text, uint64_t request_id);

// The body of a message (Header.body) as the defining layer's proto: SetBody serializes
// `body` into it; ParseBody throws kDataLoss, naming the message type, when the body is
// missing or does not parse as `body`'s type.
void SetBody(const google::protobuf::Message& body, Message* message);
void ParseBody(const Message& message, google::protobuf::Message* body);

// For the layers' decoders: why enum field `field_number` of `m` is unset, naming the
// value a peer sent when it is one this build does not know ("<what> 7 is not a known
// value"), else "<what> is missing".
std::string EnumFieldProblem(const google::protobuf::Message& m, int field_number,
                             const std::string& what);

// One line for logs: "LOOKUP #12 from rank 3, step 7, 2 payloads (I64 x 40, I32 x 8)".
std::string DescribeMessage(const Message& message);

}  // namespace dlrm::net
