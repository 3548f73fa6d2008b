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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/batch.h"

namespace dlrm {

struct SyntheticSpec {
  uint64_t seed = 1;
  int32_t num_dense = 13;
  std::vector<int64_t> cardinalities;  // one per categorical feature
  double zipf_exponent = 1.2;
  int32_t latent_dim = 4;
  double bias = -1.0;           // sets the base click rate
  double id_effect_scale = 0.5; // stddev of w_f(id)
  double interaction_scale = 0.35;  // stddev of each u_f(id) component
  double dense_effect_scale = 0.25; // stddev of a_j
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
  SyntheticSpec spec_;
  std::vector<double> zipf_cdf_norm_;  // per feature normalizer (generalized harmonic number)
};

}  // namespace dlrm
