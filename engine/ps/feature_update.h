// What a trainer sends an embedding owner after its backward: for each sparse feature the
// owner serves, the bags of the trainer's samples and the loss gradient of their pooled
// vectors. Owners concatenate the trainers' parts in rank order (= global sample order)
// and run the single-process update on the result (shard_store.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_bag.h"

namespace dlrm::ps {

struct FeatureUpdate {
  int32_t feature = 0;           // index into model.sparse_features
  std::vector<int32_t> lengths;  // [samples]
  std::vector<int64_t> ids;      // [sum(lengths)]
  std::vector<float> weights;    // like ids, or empty (all 1)
  std::vector<float> d_pooled;   // [samples x table dim]
};

// The updates of `features` (model.sparse_features indices) from a part's batch and the
// gradient of its pooled rows: d_pooled [batch_size x pooled_width], feature f's columns
// at bindings[f].offset (its table's dim wide).
std::vector<FeatureUpdate> FeatureUpdatesOf(const std::vector<int32_t>& features,
                                            const ValidatedBatch& batch,
                                            const std::vector<FeatureBinding>& bindings,
                                            const config::ModelConfig& model, const float* d_pooled,
                                            int32_t pooled_width);

// The global batch's updates from the trainers' parts, given in rank order (trainer k holds
// the k-th run of samples): per feature, the parts concatenated. Every rank must list the
// same features in the same order; throws kInvalidArgument otherwise.
std::vector<FeatureUpdate> ConcatenateRanks(const std::vector<std::vector<FeatureUpdate>>& parts);

// A flat little-endian encoding, for collectives and messages. d_pooled travels in
// `wire` (FP32, or BF16 / FP16: 16 bits a value, narrowed to nearest; the encoding says
// which). DecodeFeatureUpdates checks every count against the bytes present (a short or
// inflated buffer is rejected with kDataLoss naming the field) and never allocates more
// than the input could hold.
std::string EncodeFeatureUpdates(const std::vector<FeatureUpdate>& updates,
                                 config::TableConfig::Precision wire = config::TableConfig::FP32);
std::vector<FeatureUpdate> DecodeFeatureUpdates(const std::string& bytes);
// The size of EncodeFeatureUpdates(updates, wire), without encoding.
int64_t FeatureUpdatesBytes(const std::vector<FeatureUpdate>& updates,
                            config::TableConfig::Precision wire);

}  // namespace dlrm::ps
