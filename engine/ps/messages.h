// The embedding service's messages on the wire (engine/net; their types in ps.proto): how
// a lookup, its answer and an update are laid out in payload frames. Every decoder checks what it
// reads against the frames present and throws kDataLoss naming the rule a message broke.
//
//   LOOKUP        step; [I32 shard per request] [I64 ids per request] [all ids: U32 when
//                 every one fits (LookupIdBytes), else I64]
//   LOOKUP_REPLY  [I64 values per request] [F32 all rows, request after request; U16 with a
//                 16-bit wire precision: the rows narrowed to nearest]
//   UPDATE        step, sender_rank; [F32 learning rate] [U8 EncodeFeatureUpdates]
//   FLUSH / SAVE  step (SAVE: the checkpoint directory in body); answered by the ACKs
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cluster/messages.h"
#include "engine/core/byte_codec.h"
#include "engine/net/message.h"
#include "engine/ps/feature_update.h"
#include "engine/ps/ps.pb.h"
#include "engine/ps/shard_owner.h"

namespace dlrm::ps {

// Registers the embedding service's types (ps.proto), and the cluster's it also answers,
// with the transport's registry (net/message_types.h): called by every function here and
// by the server and its clients; idempotent.
void RegisterMessageTypes();

// Bytes a LOOKUP spends per id when its largest id is max_id: 4 up to 2^32 - 1, else 8.
// (A trainer counts what it sends with the encoder's rule.)
inline int64_t LookupIdBytes(int64_t max_id) { return FitsU32(max_id) ? 4 : 8; }

// Room a message keeps for what it carries besides its rows and per-request counts: the
// header (step, rank, payload descriptors) and small frames such as an UPDATE's learning
// rate. Servers size a LOOKUP_REPLY with it, trainers an UPDATE (at most half a message).
constexpr int64_t kMessageHeaderRoomBytes = 4096;
net::Message EncodeLookup(int64_t step, const std::vector<ShardRows>& request);
std::vector<ShardRows> DecodeLookup(const net::Message& message);

// wire: the job's DistributedConfig.wire_precision (WireValuePrecision): FP32, BF16, FP16.
net::Message EncodeLookupReply(const std::vector<ShardRows>& answered,
                               config::TableConfig::Precision wire = config::TableConfig::FP32);
// Fills request[i].rows from the reply to `request` (kDataLoss when its rows are not in
// `wire`).
void DecodeLookupReply(const net::Message& reply, std::vector<ShardRows>* request,
                       config::TableConfig::Precision wire = config::TableConfig::FP32);

struct UpdateMessage {
  int32_t rank = 0;
  int64_t step = 0;
  float lr = 0;
  std::vector<FeatureUpdate> part;
  config::TableConfig::Precision wire = config::TableConfig::FP32;  // of part's d_pooled
};
net::Message EncodeUpdate(const UpdateMessage& update);
UpdateMessage DecodeUpdate(const net::Message& message);

// A message with only a step (FLUSH) or a step and a directory (SAVE).
net::Message StepMessage(net::MessageType type, int64_t step, const std::string& body = "");
// kDataLoss unless the message carries a step.
int64_t RequiredStep(const net::Message& message);

}  // namespace dlrm::ps
