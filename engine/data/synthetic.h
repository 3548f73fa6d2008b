// Synthetic Criteo-like data with labels drawn from a planted model, so the generator
// knows every sample's true click probability and can report the Bayes-optimal AUC.
//
// Sample i is a pure function of (seed, i) (counter-based RNG), so any range of samples
// can be generated independently and in parallel.
//  - dense feature j: an integer count floor(exp(N(mu_j, sigma_j))) (Criteo-like, heavy tail);
//  - categorical feature f: one id, Zipf(zipf_exponent) over [0, cardinality_f), with
//    the rank-to-id mapping scrambled so hot ids are spread over the table;
//  - planted logit = bias + sum_j a_j * log1p(count_j) + sum_f w_f(id_f)
//                    + sum_{f<g} <u_f(id_f), u_g(id_g)> (rank latent_dim)
//    with per-id parameters drawn from the RNG keyed by (seed, f, id); label ~ Bernoulli.
//    The sum of the non-bias terms is centered (its mean over a fixed set of samples is
//    subtracted), so bias is the mean planted logit and sets the base rate for any seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/zipf.h"
#include "engine/data/batch.h"

namespace dlrm {

// The raw id `dlrm generate --raw_ids` writes for id `id` of categorical feature
// `feature`: a fixed bijection of the 64-bit range per feature (MurmurHash3's finalizer
// after a per-feature offset), so the same samples train FIXED tables on the ids and
// DYNAMIC ones on ids spread over the whole int64 range, negative ones included.
int64_t RawId(int64_t id, int32_t feature);

struct SyntheticSpec {
  uint64_t seed = 1;
  int32_t num_dense = 13;
  std::vector<int64_t> cardinalities;  // one per categorical feature
  double zipf_exponent = 1.2;
  int32_t latent_dim = 4;
  // Defaults: with 26 features of a few thousand ids and 13 dense features, the label
  // mean is ~0.30 and the Bayes AUC ~0.80 (Criteo-like).
  double bias = -1.1;               // the mean planted logit: sets the base click rate
  double id_effect_scale = 0.22;    // stddev of w_f(id)
  double interaction_scale = 0.12;  // stddev of each u_f(id) component
  double dense_effect_scale = 0.2;  // stddev of a_j
  // Each id as RawId(id, feature) (the planted model is unchanged: same labels), written
  // to TSV as 16 hex digits, for DYNAMIC tables.
  bool raw_ids = false;
};

struct SyntheticSample {
  float label = 0;
  std::vector<int64_t> dense_counts;  // num_dense raw integer counts
  std::vector<int64_t> ids;           // one id per categorical feature
  double probability = 0;             // the planted model's true P(label = 1)
};

class SyntheticGenerator {
 public:
  // Throws dlrm::Error(kInvalidArgument) naming the bad field of spec.
  explicit SyntheticGenerator(SyntheticSpec spec);

  SyntheticSample Sample(int64_t index) const;

  // Samples [first, first + count) as a batch in the engine layout (dense = log1p(count),
  // bags of exactly one id). probabilities, if not null, receives the true probabilities.
  OwnedBatch Generate(int64_t first, int64_t count, std::vector<double>* probabilities) const;

  // Writes samples [first, first + count) as Criteo TSV (ids as lowercase hex) and
  // returns the Bayes-optimal AUC of those samples: the AUC of the true probabilities
  // against the drawn labels. Throws kIo on write failure.
  double WriteTsv(const std::string& path, int64_t first, int64_t count) const;

  const SyntheticSpec& spec() const { return spec_; }

 private:
  // Per categorical feature: the constants of rejection-inversion Zipf sampling over
  // ranks [1, n] and the bijective scramble id = (multiplier * (rank - 1) + offset) mod n.
  struct ZipfFeature {
    int64_t n = 0;
    ZipfSampler sampler;
    uint64_t multiplier = 0;
    uint64_t offset = 0;
  };
  int64_t DrawId(size_t feature, int64_t index) const;
  // Fills counts and ids of sample `index`; returns its planted logit without bias.
  double DrawFeatures(int64_t index, SyntheticSample* sample) const;

  SyntheticSpec spec_;
  std::vector<ZipfFeature> zipf_;
  std::vector<double> dense_mu_, dense_sigma_, dense_weight_;  // per dense feature
  double logit_center_ = 0;  // mean of DrawFeatures' logit, estimated from the seed
};

}  // namespace dlrm
