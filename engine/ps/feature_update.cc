#include "engine/ps/feature_update.h"

#include "engine/core/byte_codec.h"
#include "engine/core/status.h"

namespace dlrm::ps {

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
      if (part.weights.empty() != all.weights.empty())
        ThrowInvalid("feature ", all.feature, ": rank ", rank,
                     " disagrees with rank 0 on per-id weights");
      all.lengths.insert(all.lengths.end(), part.lengths.begin(), part.lengths.end());
      all.ids.insert(all.ids.end(), part.ids.begin(), part.ids.end());
      all.weights.insert(all.weights.end(), part.weights.begin(), part.weights.end());
      all.d_pooled.insert(all.d_pooled.end(), part.d_pooled.begin(), part.d_pooled.end());
    }
  }
  return global;
}

std::string EncodeFeatureUpdates(const std::vector<FeatureUpdate>& updates) {
  ByteWriter out;
  out.Put<uint64_t>(updates.size());
  for (const FeatureUpdate& u : updates) {
    out.Put<int32_t>(u.feature);
    out.PutArray(u.lengths);
    out.PutArray(u.ids);
    out.PutArray(u.weights);
    out.PutArray(u.d_pooled);
  }
  return std::move(out).Take();
}

std::vector<FeatureUpdate> DecodeFeatureUpdates(const std::string& bytes) {
  ByteReader in(bytes, "feature updates");
  const auto count = in.Get<uint64_t>("the update count");
  // Each update takes at least 36 bytes (feature + four array counts).
  if (count > bytes.size() / 36)
    Throw(StatusCode::kDataLoss, "feature updates: count ", count, " exceeds what ", bytes.size(),
          " bytes can hold");
  std::vector<FeatureUpdate> updates(static_cast<size_t>(count));
  for (FeatureUpdate& u : updates) {
    u.feature = in.Get<int32_t>("feature");
    in.GetArray("lengths", &u.lengths);
    in.GetArray("ids", &u.ids);
    in.GetArray("weights", &u.weights);
    in.GetArray("d_pooled", &u.d_pooled);
  }
  in.ExpectEnd();
  return updates;
}

}  // namespace dlrm::ps
