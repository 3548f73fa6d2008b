#include "engine/ps/feature_update.h"

#include <algorithm>
#include <utility>

#include "engine/core/byte_codec.h"
#include "engine/core/status.h"
#include "engine/embedding/wire_values.h"

namespace dlrm::ps {

std::vector<FeatureUpdate> FeatureUpdatesOf(const std::vector<int32_t>& features,
                                            const ValidatedBatch& batch,
                                            const std::vector<FeatureBinding>& bindings,
                                            const config::ModelConfig& model, const float* d_pooled,
                                            int32_t pooled_width) {
  const BatchView& view = batch.view;
  const int64_t samples = view.batch_size;
  std::vector<FeatureUpdate> updates;
  for (const int32_t f : features) {
    const FeatureBinding& b = bindings[f];
    const int32_t dim = model.tables(b.table).dim();
    FeatureUpdate u;
    u.feature = f;
    u.lengths.assign(view.lengths + f * samples, view.lengths + (f + 1) * samples);
    const int64_t begin = batch.bag_begin(f, 0), end = batch.bag_begin(f + 1, 0);
    u.ids.assign(view.ids + begin, view.ids + end);
    if (view.weights) u.weights.assign(view.weights + begin, view.weights + end);
    u.d_pooled.resize(static_cast<size_t>(samples) * dim);
    for (int64_t r = 0; r < samples; ++r) {
      const float* src = d_pooled + r * pooled_width + b.offset;
      std::copy(src, src + dim, u.d_pooled.begin() + r * dim);
    }
    updates.push_back(std::move(u));
  }
  return updates;
}

std::vector<FeatureUpdate> ConcatenateRanks(const std::vector<std::vector<FeatureUpdate>>& parts) {
  if (parts.empty()) return {};
  std::vector<FeatureUpdate> global = parts[0];
  for (size_t rank = 1; rank < parts.size(); ++rank) {
    if (parts[rank].size() != global.size())
      ThrowInvalid("rank ", rank, " sent ", parts[rank].size(), " feature updates, rank 0 sent ",
                   global.size());
    for (size_t i = 0; i < global.size(); ++i) {
      const FeatureUpdate& part = parts[rank][i];
      FeatureUpdate& all = global[i];
      if (part.feature != all.feature)
        ThrowInvalid("rank ", rank, " update ", i, " is feature ", part.feature,
                     ", rank 0's is feature ", all.feature);
      // A part without per-id weights means weights of 1 (the same sums, bit for bit), as
      // PooledLayout::JoinInput joins bags: one rank's weighted part weights them all.
      if (all.weights.empty() && !part.weights.empty()) all.weights.assign(all.ids.size(), 1.0f);
      all.lengths.insert(all.lengths.end(), part.lengths.begin(), part.lengths.end());
      all.ids.insert(all.ids.end(), part.ids.begin(), part.ids.end());
      if (!part.weights.empty())
        all.weights.insert(all.weights.end(), part.weights.begin(), part.weights.end());
      else if (!all.weights.empty())
        all.weights.insert(all.weights.end(), part.ids.size(), 1.0f);
      all.d_pooled.insert(all.d_pooled.end(), part.d_pooled.begin(), part.d_pooled.end());
    }
  }
  return global;
}

std::string EncodeFeatureUpdates(const std::vector<FeatureUpdate>& updates,
                                 config::TableConfig::Precision wire) {
  DLRM_INTERNAL_CHECK(wire == config::TableConfig::FP32 || IsHalf(wire));
  ByteWriter out;
  out.Put<uint64_t>(updates.size());
  out.Put<uint8_t>(static_cast<uint8_t>(wire));
  std::vector<uint16_t> narrow;
  for (const FeatureUpdate& u : updates) {
    out.Put<int32_t>(u.feature);
    out.PutArray(u.lengths);
    out.PutIndices(u.ids);
    out.PutArray(u.weights);
    PutWireValues(u.d_pooled.data(), u.d_pooled.size(), wire, &narrow, &out);
  }
  return std::move(out).Take();
}

int64_t FeatureUpdatesBytes(const std::vector<FeatureUpdate>& updates,
                            config::TableConfig::Precision wire) {
  const int64_t value_bytes = IsHalf(wire) ? 2 : 4;
  int64_t bytes = sizeof(uint64_t) + sizeof(uint8_t);  // count, wire precision
  for (const FeatureUpdate& u : updates)
    bytes += static_cast<int64_t>(
                 sizeof(int32_t) + 3 * sizeof(uint64_t) + u.lengths.size() * sizeof(int32_t) +
                 ByteWriter::IndicesBytes(u.ids) + u.weights.size() * sizeof(float)) +
             static_cast<int64_t>(u.d_pooled.size()) * value_bytes;
  return bytes;
}

std::vector<FeatureUpdate> DecodeFeatureUpdates(const std::string& bytes) {
  ByteReader in(bytes, "feature updates");
  const auto count = in.Get<uint64_t>("the update count");
  // Each update takes at least 37 bytes (feature, four array counts, the ids' width).
  if (count > bytes.size() / 37)
    Throw(StatusCode::kDataLoss, "feature updates: count ", count, " exceeds what ", bytes.size(),
          " bytes can hold");
  const auto wire = static_cast<config::TableConfig::Precision>(in.Get<uint8_t>("wire precision"));
  if (wire != config::TableConfig::FP32 && !IsHalf(wire))
    Throw(StatusCode::kDataLoss, "feature updates: wire precision ", static_cast<int>(wire),
          " is not FP32 (0), BF16 (1) or FP16 (2)");
  std::vector<FeatureUpdate> updates(static_cast<size_t>(count));
  std::vector<uint16_t> narrow;
  for (FeatureUpdate& u : updates) {
    u.feature = in.Get<int32_t>("feature");
    in.GetArray("lengths", &u.lengths);
    in.GetIndices("ids", &u.ids);
    in.GetArray("weights", &u.weights);
    GetWireValues(&in, "d_pooled", wire, &narrow, &u.d_pooled);
  }
  in.ExpectEnd();
  return updates;
}

}  // namespace dlrm::ps
