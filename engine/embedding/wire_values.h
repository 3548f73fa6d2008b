// fp32 values on a wire of `wire` precision (DistributedConfig.wire_precision through
// WireValuePrecision: FP32, or BF16 / FP16 at 16 bits a value): the one encoding of value
// arrays that every exchange between ranks uses (feature updates, the trainers' dense
// exchange, pooled embeddings and their gradients). On a 16-bit wire values are rounded
// where they are made (RoundForWire), so that the sender keeps the bits every receiver
// sees, and narrowing them for the wire then loses nothing.
//
// Threading: functions over the caller's buffers. Errors: the reader's (kDataLoss naming
// `what` for a short or inflated array).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/config.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/byte_codec.h"
#include "engine/embedding/half_row.h"

namespace dlrm {

// values rounded to what `wire` carries (to nearest); nothing to do for FP32.
inline void RoundForWire(std::vector<float>* values, config::TableConfig::Precision wire) {
  if (IsHalf(wire)) RoundToHalf(values->data(), static_cast<int64_t>(values->size()), wire);
}

// Appends n values as an array of `wire` words. scratch: a reused buffer for the 16-bit
// words.
inline void PutWireValues(const float* values, size_t n, config::TableConfig::Precision wire,
                          std::vector<uint16_t>* scratch, ByteWriter* out) {
  if (!IsHalf(wire)) {
    out->PutArray(values, n);
    return;
  }
  scratch->resize(n);
  NarrowValues(values, static_cast<int64_t>(n), wire, scratch->data());
  out->PutArray(*scratch);
}

// Reads what PutWireValues wrote into *values (resized), widened to fp32.
inline void GetWireValues(ByteReader* in, const char* what, config::TableConfig::Precision wire,
                          std::vector<uint16_t>* scratch, std::vector<float>* values) {
  if (!IsHalf(wire)) {
    in->GetArray(what, values);
    return;
  }
  in->GetArray(what, scratch);
  values->resize(scratch->size());
  WidenValues(scratch->data(), static_cast<int64_t>(scratch->size()), wire, values->data());
}

}  // namespace dlrm
