#include "engine/ps/messages.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/core/status.h"
#include "engine/embedding/half_row.h"

namespace dlrm::ps {
namespace {

// kDataLoss unless `message` has exactly the payload dtypes `want`.
void ExpectPayloads(const net::Message& message, std::initializer_list<net::DType> want) {
  RegisterMessageTypes();
  const std::string what = net::MessageTypeName(message.header.type());
  if (message.payloads.size() != want.size())
    Throw(StatusCode::kDataLoss, what, " has ", message.payloads.size(), " payloads, expected ",
          want.size());
  size_t i = 0;
  for (const net::DType dtype : want) {
    if (message.payloads[i].dtype() != dtype)
      Throw(StatusCode::kDataLoss, what, " payload ", i, " is ",
            net::DTypeName(message.payloads[i].dtype()), ", expected ", net::DTypeName(dtype));
    ++i;
  }
}

// A message of one of the embedding service's types, registered.
net::Message Make(net::MessageType type) {
  RegisterMessageTypes();
  return net::MakeMessage(type);
}

// Every request's ids, request after request, as one payload of Word.
template <typename Word>
net::Payload JoinedIds(const std::vector<ShardRows>& request, size_t total) {
  net::Payload ids = net::Payload::Zeros<Word>(static_cast<int64_t>(total));
  Word* out = ids.mutable_data<Word>();
  for (const ShardRows& r : request)
    for (const int64_t id : r.ids) *out++ = static_cast<Word>(id);
  return ids;
}

// Ids [at, at + n) of a LOOKUP's id payload (U32 or I64), widened.
void CopyIds(const net::Payload& ids, int64_t at, int64_t n, std::vector<int64_t>* out) {
  if (ids.dtype() == net::PayloadDescriptor::U32) {
    const uint32_t* from = ids.data<uint32_t>() + at;
    out->assign(from, from + n);
  } else {
    const int64_t* from = ids.data<int64_t>() + at;
    out->assign(from, from + n);
  }
}

}  // namespace

void RegisterMessageTypes() {
  [[maybe_unused]] static const bool once = [] {
    cluster::RegisterMessageTypes();  // a server also answers SHUTDOWN and HEARTBEAT
    return net::RegisterMessageTypes("ps", &MessageType_descriptor);
  }();
}

net::Message EncodeLookup(int64_t step, const std::vector<ShardRows>& request) {
  net::Message m = Make(LOOKUP);
  m.header.set_step(step);
  std::vector<int32_t> shards;
  std::vector<int64_t> counts;
  size_t total = 0;
  bool narrow = true;
  for (const ShardRows& r : request) {
    shards.push_back(r.shard);
    counts.push_back(static_cast<int64_t>(r.ids.size()));
    total += r.ids.size();
    for (const int64_t id : r.ids) narrow &= FitsU32(id);
  }
  m.payloads.push_back(net::Payload::Copy(shards));
  m.payloads.push_back(net::Payload::Copy(counts));
  m.payloads.push_back(narrow ? JoinedIds<uint32_t>(request, total)
                              : JoinedIds<int64_t>(request, total));
  return m;
}

std::vector<ShardRows> DecodeLookup(const net::Message& message) {
  // The ids' payload is U32 or I64 (the encoder's choice): checked as either, then read.
  const bool narrow =
      message.payloads.size() == 3 && message.payloads[2].dtype() == net::PayloadDescriptor::U32;
  ExpectPayloads(message, {net::PayloadDescriptor::I32, net::PayloadDescriptor::I64,
                           narrow ? net::PayloadDescriptor::U32 : net::PayloadDescriptor::I64});
  RequiredStep(message);
  const net::Payload& shards = message.payloads[0];
  const net::Payload& counts = message.payloads[1];
  const net::Payload& ids = message.payloads[2];
  if (shards.count() != counts.count())
    Throw(StatusCode::kDataLoss, "LOOKUP names ", shards.count(), " shards but has ",
          counts.count(), " id counts");
  std::vector<ShardRows> request(static_cast<size_t>(shards.count()));
  int64_t at = 0;
  for (size_t i = 0; i < request.size(); ++i) {
    const int64_t n = counts.data<int64_t>()[i];
    if (n < 0 || n > ids.count() - at)
      Throw(StatusCode::kDataLoss, "LOOKUP request ", i, " claims ", n, " ids but ",
            ids.count() - at, " remain");
    request[i].shard = shards.data<int32_t>()[i];
    CopyIds(ids, at, n, &request[i].ids);
    at += n;
  }
  if (at != ids.count())
    Throw(StatusCode::kDataLoss, "LOOKUP carries ", ids.count(), " ids, its counts sum to ", at);
  return request;
}

net::Message EncodeLookupReply(const std::vector<ShardRows>& answered,
                               config::TableConfig::Precision wire) {
  net::Message m = Make(LOOKUP_REPLY);
  std::vector<int64_t> counts;
  size_t total = 0;
  for (const ShardRows& r : answered) {
    counts.push_back(static_cast<int64_t>(r.rows.size()));
    total += r.rows.size();
  }
  m.payloads.push_back(net::Payload::Copy(counts));
  if (IsHalf(wire)) {
    net::Payload rows = net::Payload::Zeros<uint16_t>(static_cast<int64_t>(total));
    uint16_t* out = rows.mutable_data<uint16_t>();
    for (const ShardRows& r : answered) {
      NarrowValues(r.rows.data(), static_cast<int64_t>(r.rows.size()), wire, out);
      out += r.rows.size();
    }
    m.payloads.push_back(std::move(rows));
    return m;
  }
  net::Payload rows = net::Payload::Zeros<float>(static_cast<int64_t>(total));
  float* out = rows.mutable_data<float>();
  for (const ShardRows& r : answered) out = std::copy(r.rows.begin(), r.rows.end(), out);
  m.payloads.push_back(std::move(rows));
  return m;
}

void DecodeLookupReply(const net::Message& reply, std::vector<ShardRows>* request,
                       config::TableConfig::Precision wire) {
  const bool half = IsHalf(wire);
  ExpectPayloads(reply, {net::PayloadDescriptor::I64,
                         half ? net::PayloadDescriptor::U16 : net::PayloadDescriptor::F32});
  const net::Payload& counts = reply.payloads[0];
  const net::Payload& rows = reply.payloads[1];
  if (counts.count() != static_cast<int64_t>(request->size()))
    Throw(StatusCode::kDataLoss, "LOOKUP_REPLY answers ", counts.count(), " requests, ",
          request->size(), " were asked");
  int64_t at = 0;
  for (size_t i = 0; i < request->size(); ++i) {
    const int64_t n = counts.data<int64_t>()[i];
    if (n < 0 || n > rows.count() - at)
      Throw(StatusCode::kDataLoss, "LOOKUP_REPLY request ", i, " claims ", n, " values but ",
            rows.count() - at, " remain");
    std::vector<float>& values = (*request)[i].rows;
    if (half) {
      values.resize(static_cast<size_t>(n));
      WidenValues(rows.data<uint16_t>() + at, n, wire, values.data());
    } else {
      values.assign(rows.data<float>() + at, rows.data<float>() + at + n);
    }
    at += n;
  }
  if (at != rows.count())
    Throw(StatusCode::kDataLoss, "LOOKUP_REPLY carries ", rows.count(),
          " values, its counts sum to ", at);
}

net::Message EncodeUpdate(const UpdateMessage& update) {
  net::Message m = Make(UPDATE);
  m.header.set_step(update.step);
  m.header.set_sender_rank(update.rank);
  const std::string bytes = EncodeFeatureUpdates(update.part, update.wire);
  m.payloads.push_back(net::Payload::Copy(&update.lr, 1));
  m.payloads.push_back(net::Payload::Copy(reinterpret_cast<const uint8_t*>(bytes.data()),
                                          static_cast<int64_t>(bytes.size())));
  return m;
}

UpdateMessage DecodeUpdate(const net::Message& message) {
  ExpectPayloads(message, {net::PayloadDescriptor::F32, net::PayloadDescriptor::U8});
  if (!message.header.has_sender_rank()) Throw(StatusCode::kDataLoss, "UPDATE has no sender_rank");
  if (message.payloads[0].count() != 1)
    Throw(StatusCode::kDataLoss, "UPDATE learning rate payload has ", message.payloads[0].count(),
          " values, expected 1");
  UpdateMessage u;
  u.rank = message.header.sender_rank();
  u.step = RequiredStep(message);
  u.lr = message.payloads[0].data<float>()[0];
  const net::Payload& bytes = message.payloads[1];
  u.part = DecodeFeatureUpdates(std::string(reinterpret_cast<const char*>(bytes.data<uint8_t>()),
                                            static_cast<size_t>(bytes.count())));
  return u;
}

net::Message StepMessage(net::MessageType type, int64_t step, const std::string& body) {
  net::Message m = Make(type);
  m.header.set_step(step);
  if (!body.empty()) m.header.set_body(body);
  return m;
}

int64_t RequiredStep(const net::Message& message) {
  if (!message.header.has_step())
    Throw(StatusCode::kDataLoss, net::MessageTypeName(message.header.type()), " has no step");
  return message.header.step();
}

}  // namespace dlrm::ps
