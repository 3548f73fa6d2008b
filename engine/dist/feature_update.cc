#include "engine/dist/feature_update.h"

#include <cstring>

#include "engine/core/status.h"

namespace dlrm::dist {
namespace {

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
void PutArray(std::string* out, const std::vector<T>& values) {
  Put<uint64_t>(out, values.size());
  out->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}

  template <typename T>
  T Get(const char* what) {
    T value;
    Need(sizeof(T), what);
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  template <typename T>
  std::vector<T> GetArray(const char* what) {
    const auto count = Get<uint64_t>(what);
    // Checked against the bytes left before allocating: a forged count cannot make us
    // reserve more memory than the message itself occupies.
    if (count > (bytes_.size() - pos_) / sizeof(T))
      Throw(StatusCode::kDataLoss, "feature updates: ", what, " claims ", count,
            " values but only ", bytes_.size() - pos_, " bytes remain");
    std::vector<T> values(static_cast<size_t>(count));
    std::memcpy(values.data(), bytes_.data() + pos_, count * sizeof(T));
    pos_ += count * sizeof(T);
    return values;
  }

  bool done() const { return pos_ == bytes_.size(); }

 private:
  void Need(size_t n, const char* what) const {
    if (bytes_.size() - pos_ < n)
      Throw(StatusCode::kDataLoss, "feature updates: truncated in ", what);
  }
  const std::string& bytes_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<FeatureUpdate> ConcatenateRanks(
    const std::vector<std::vector<FeatureUpdate>>& parts) {
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
  std::string out;
  Put<uint64_t>(&out, updates.size());
  for (const FeatureUpdate& u : updates) {
    Put<int32_t>(&out, u.feature);
    PutArray(&out, u.lengths);
    PutArray(&out, u.ids);
    PutArray(&out, u.weights);
    PutArray(&out, u.d_pooled);
  }
  return out;
}

std::vector<FeatureUpdate> DecodeFeatureUpdates(const std::string& bytes) {
  Reader in(bytes);
  const auto count = in.Get<uint64_t>("the update count");
  // Each update takes at least 36 bytes (feature + four array counts).
  if (count > bytes.size() / 36)
    Throw(StatusCode::kDataLoss, "feature updates: count ", count, " exceeds what ",
          bytes.size(), " bytes can hold");
  std::vector<FeatureUpdate> updates(static_cast<size_t>(count));
  for (FeatureUpdate& u : updates) {
    u.feature = in.Get<int32_t>("feature");
    u.lengths = in.GetArray<int32_t>("lengths");
    u.ids = in.GetArray<int64_t>("ids");
    u.weights = in.GetArray<float>("weights");
    u.d_pooled = in.GetArray<float>("d_pooled");
  }
  if (!in.done()) Throw(StatusCode::kDataLoss, "feature updates: trailing bytes");
  return updates;
}

}  // namespace dlrm::dist
