#include "engine/data/synthetic.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <utility>

#include "engine/core/metrics.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"
#include "engine/core/zipf.h"
#include "engine/data/criteo_dense.h"

namespace dlrm {

int64_t RawId(int64_t id, int32_t feature) {
  uint64_t x = static_cast<uint64_t>(id) +
               (static_cast<uint64_t>(feature) + 1) * 0x9E3779B97F4A7C15ULL;  // each step bijective
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDULL;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ULL;
  x ^= x >> 33;
  return static_cast<int64_t>(x);
}
namespace {

// Sub-streams of kStreamSynthetic. Each consumer gets its own, so e.g. adding a dense
// feature does not change any id drawn.
constexpr uint64_t kGlobalStream = 0;             // index 0: mu/sigma, index 1: dense weights
constexpr uint64_t kSampleStream = 1;             // index i: dense normals, then the label uniform
constexpr uint64_t kScrambleStream = 2;           // index f: rank -> id scramble of feature f
constexpr uint64_t kZipfStreamBase = 1ull << 20;  // + f, index i: Zipf uniforms
constexpr uint64_t kIdParamStreamBase = 2ull << 20;  // + f, index id: w_f(id), u_f(id)

// CounterRng spreads an index over the low 64 counter bits as (index << 20) ^ (j >> 2), so
// indices (sample numbers and ids) must stay below 2^44 to be distinct.
constexpr int64_t kMaxIndex = int64_t{1} << 44;
constexpr size_t kMaxFeatures = size_t{1} << 20;
constexpr int32_t kMaxDense = 4096;
constexpr int32_t kMaxLatentDim = 1024;
// Uniforms per (stream, index) are addressed by j < 2^22; leave the Zipf loop well inside.
constexpr uint64_t kMaxZipfAttempts = uint64_t{1} << 21;
constexpr int64_t kCenteringSamples = 2048;            // std error of the center ~ 0.04 logits
constexpr int64_t kMaxCount = (int64_t{1} << 31) - 1;  // a Criteo count is a 32-bit int

constexpr int kTsvDense = 13;
constexpr size_t kTsvSparse = 26;
constexpr int64_t kMaxTsvCardinality = int64_t{1} << 32;  // ids are written as 8 hex digits
constexpr int64_t kTsvChunk = 1024;                       // samples formatted by one task
constexpr unsigned kMaxTsvThreads = 16;

uint64_t MulMod(uint64_t a, uint64_t b, uint64_t n) {
  __extension__ using Uint128 = unsigned __int128;
  return static_cast<uint64_t>(static_cast<Uint128>(a) * b % n);
}

// 64 random bits from CounterRng: each uniform carries exactly 24 bits (UnitFromBits).
uint64_t RandomBits64(const CounterRng& rng, uint64_t j) {
  uint64_t bits = 0;
  for (uint64_t k = 0; k < 3; ++k) {
    bits = (bits << 24) | static_cast<uint64_t>(rng.Uniform(j + k) * 16777216.0);
  }
  return bits;
}

void CheckFinite(double value, const char* field) {
  if (!std::isfinite(value)) ThrowInvalid("SyntheticSpec.", field, " must be finite, got ", value);
}

void ValidateSpec(const SyntheticSpec& spec) {
  if (spec.cardinalities.empty()) ThrowInvalid("SyntheticSpec.cardinalities must not be empty");
  if (spec.cardinalities.size() > kMaxFeatures)
    ThrowInvalid("SyntheticSpec.cardinalities has ", spec.cardinalities.size(),
                 " features, at most ", kMaxFeatures, " allowed");
  for (size_t f = 0; f < spec.cardinalities.size(); ++f) {
    const int64_t n = spec.cardinalities[f];
    if (n <= 0 || n > kMaxIndex)
      ThrowInvalid("SyntheticSpec.cardinalities[", f, "] must be in [1, 2^44], got ", n);
  }
  if (spec.num_dense < 0 || spec.num_dense > kMaxDense)
    ThrowInvalid("SyntheticSpec.num_dense must be in [0, ", kMaxDense, "], got ", spec.num_dense);
  if (spec.latent_dim < 0 || spec.latent_dim > kMaxLatentDim)
    ThrowInvalid("SyntheticSpec.latent_dim must be in [0, ", kMaxLatentDim, "], got ",
                 spec.latent_dim);
  CheckFinite(spec.zipf_exponent, "zipf_exponent");
  if (spec.zipf_exponent <= 0)
    ThrowInvalid("SyntheticSpec.zipf_exponent must be > 0, got ", spec.zipf_exponent);
  CheckFinite(spec.bias, "bias");
  const std::pair<double, const char*> scales[] = {{spec.id_effect_scale, "id_effect_scale"},
                                                   {spec.interaction_scale, "interaction_scale"},
                                                   {spec.dense_effect_scale, "dense_effect_scale"}};
  for (const auto& [value, field] : scales) {
    CheckFinite(value, field);
    if (value < 0) ThrowInvalid("SyntheticSpec.", field, " must be >= 0, got ", value);
  }
}

void CheckRange(int64_t first, int64_t count) {
  if (first < 0 || count < 0 || first > kMaxIndex - count)
    Throw(StatusCode::kOutOfRange, "SyntheticGenerator: first = ", first, ", count = ", count,
          ": samples must lie in [0, 2^44)");
}

// Closes a stdio stream on scope exit unless closed (and checked) explicitly before.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Appends "\t<value>" in decimal (base 10) or as `hex_width` lowercase hex digits (base
// 16: 8 as Criteo's hashes, 16 for raw ids).
void AppendField(std::string* line, uint64_t value, int base, size_t hex_width = 8) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), value, base);
  const size_t len = static_cast<size_t>(result.ptr - digits);
  line->push_back('\t');
  if (base == 16 && len < hex_width) line->append(hex_width - len, '0');
  line->append(digits, len);
}

}  // namespace

SyntheticGenerator::SyntheticGenerator(SyntheticSpec spec) : spec_(std::move(spec)) {
  ValidateSpec(spec_);
  const double s = spec_.zipf_exponent;
  for (size_t f = 0; f < spec_.cardinalities.size(); ++f) {
    ZipfFeature z{spec_.cardinalities[f],
                  ZipfSampler(s, static_cast<double>(spec_.cardinalities[f]))};
    // Multiplying by a unit mod n is a bijection of [0, n); it sends consecutive ranks
    // far apart so the hot ids of a table are not clustered at its start.
    const CounterRng rng(spec_.seed, kStreamSynthetic + kScrambleStream, f);
    const auto n = static_cast<uint64_t>(z.n);
    z.multiplier = RandomBits64(rng, 0) % n;
    z.offset = RandomBits64(rng, 3) % n;
    while (n > 1 && std::gcd(z.multiplier, n) != 1) z.multiplier = (z.multiplier + 1) % n;
    zipf_.push_back(z);
  }

  // Per dense feature: log-normal count parameters and the planted weight.
  const CounterRng params(spec_.seed, kStreamSynthetic + kGlobalStream, 0);
  const CounterRng weights(spec_.seed, kStreamSynthetic + kGlobalStream, 1);
  for (int32_t j = 0; j < spec_.num_dense; ++j) {
    dense_mu_.push_back(3.0 * params.Uniform(2 * j));
    dense_sigma_.push_back(0.5 + params.Uniform(2 * j + 1));
    dense_weight_.push_back(spec_.dense_effect_scale * weights.Normal(j));
  }

  // Without centering, the seed's draws for the few hottest ids (and the dense weights
  // times mean log-counts) would shift every sample's logit by a random amount, so the
  // base rate would depend on the seed. The mean over a fixed set of samples is a pure
  // function of the spec, so samples stay pure functions of (seed, index).
  SyntheticSample scratch;
  double sum = 0;
  for (int64_t i = 0; i < kCenteringSamples; ++i) sum += DrawFeatures(i, &scratch);
  logit_center_ = sum / kCenteringSamples;
}

int64_t SyntheticGenerator::DrawId(size_t feature, int64_t index) const {
  const ZipfFeature& z = zipf_[feature];
  const CounterRng rng(spec_.seed, kStreamSynthetic + kZipfStreamBase + feature,
                       static_cast<uint64_t>(index));
  for (uint64_t attempt = 0; attempt < kMaxZipfAttempts; ++attempt) {
    if (const std::optional<double> k = z.sampler.TryRank(rng.Uniform(attempt))) {
      const auto rank0 = static_cast<uint64_t>(*k) - 1;
      const auto n = static_cast<uint64_t>(z.n);
      return static_cast<int64_t>((MulMod(rank0, z.multiplier, n) + z.offset) % n);
    }
  }
  // Each attempt is accepted with high probability (the hat hugs h closely), so this
  // point is unreachable in practice.
  Throw(StatusCode::kInternal, "SyntheticGenerator: Zipf sampling did not converge");
}

double SyntheticGenerator::DrawFeatures(int64_t index, SyntheticSample* sample) const {
  const CounterRng rng(spec_.seed, kStreamSynthetic + kSampleStream, static_cast<uint64_t>(index));
  double logit = 0;
  sample->dense_counts.resize(static_cast<size_t>(spec_.num_dense));
  for (int32_t j = 0; j < spec_.num_dense; ++j) {
    const double log_count = dense_mu_[j] + dense_sigma_[j] * rng.Normal(j);
    const double count = std::min(std::floor(std::exp(log_count)), static_cast<double>(kMaxCount));
    sample->dense_counts[j] = static_cast<int64_t>(count);
    logit += dense_weight_[j] * std::log1p(count);
  }

  // sum_{f<g} <u_f, u_g> = (|sum_f u_f|^2 - sum_f |u_f|^2) / 2: O(F d) instead of O(F^2 d).
  const size_t latent = static_cast<size_t>(spec_.latent_dim);
  std::vector<double> u_sum(latent, 0.0);
  double u_square_sum = 0;
  sample->ids.resize(zipf_.size());
  for (size_t f = 0; f < zipf_.size(); ++f) {
    const int64_t id = DrawId(f, index);
    sample->ids[f] = spec_.raw_ids ? RawId(id, static_cast<int32_t>(f)) : id;
    const CounterRng id_rng(spec_.seed, kStreamSynthetic + kIdParamStreamBase + f,
                            static_cast<uint64_t>(id));
    logit += spec_.id_effect_scale * id_rng.Normal(0);
    for (size_t k = 0; k < latent; ++k) {
      const double u = spec_.interaction_scale * id_rng.Normal(1 + k);
      u_sum[k] += u;
      u_square_sum += u * u;
    }
  }
  double interaction = -u_square_sum;
  for (const double v : u_sum) interaction += v * v;
  return logit + 0.5 * interaction;
}

SyntheticSample SyntheticGenerator::Sample(int64_t index) const {
  CheckRange(index, 1);
  SyntheticSample sample;
  const double logit = spec_.bias + DrawFeatures(index, &sample) - logit_center_;
  sample.probability = 1.0 / (1.0 + std::exp(-logit));
  // Uniforms 0 .. 2 * num_dense - 1 of this index went into the dense normals.
  const CounterRng rng(spec_.seed, kStreamSynthetic + kSampleStream, static_cast<uint64_t>(index));
  const double u = rng.Uniform(2 * static_cast<uint64_t>(spec_.num_dense));
  sample.label = u < sample.probability ? 1.0f : 0.0f;
  return sample;
}

OwnedBatch SyntheticGenerator::Generate(int64_t first, int64_t count,
                                        std::vector<double>* probabilities) const {
  CheckRange(first, count);
  const int32_t num_dense = spec_.num_dense;
  const auto num_sparse = static_cast<int32_t>(zipf_.size());
  OwnedBatch batch;
  batch.batch_size = count;
  batch.num_dense = num_dense;
  batch.num_sparse = num_sparse;
  batch.dense.resize(static_cast<size_t>(count * num_dense));
  batch.labels.resize(static_cast<size_t>(count));
  batch.lengths.assign(static_cast<size_t>(count * num_sparse), 1);
  batch.ids.resize(static_cast<size_t>(count * num_sparse));
  if (probabilities != nullptr) probabilities->resize(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    const SyntheticSample sample = Sample(first + b);
    batch.labels[b] = sample.label;
    for (int32_t j = 0; j < num_dense; ++j)
      batch.dense[b * num_dense + j] = CriteoDenseValue(sample.dense_counts[j]);
    // Every bag holds one id, so feature f's ids start at f * count.
    for (int32_t f = 0; f < num_sparse; ++f) batch.ids[f * count + b] = sample.ids[f];
    if (probabilities != nullptr) (*probabilities)[b] = sample.probability;
  }
  return batch;
}

double SyntheticGenerator::WriteTsv(const std::string& path, int64_t first, int64_t count) const {
  if (spec_.num_dense != kTsvDense)
    ThrowInvalid("SyntheticGenerator::WriteTsv: Criteo TSV needs SyntheticSpec.num_dense = ",
                 kTsvDense, ", got ", spec_.num_dense);
  if (spec_.cardinalities.size() != kTsvSparse)
    ThrowInvalid("SyntheticGenerator::WriteTsv: Criteo TSV needs ", kTsvSparse,
                 " SyntheticSpec.cardinalities, got ", spec_.cardinalities.size());
  for (size_t f = 0; f < kTsvSparse && !spec_.raw_ids; ++f) {
    if (spec_.cardinalities[f] > kMaxTsvCardinality)
      ThrowInvalid("SyntheticGenerator::WriteTsv: SyntheticSpec.cardinalities[", f,
                   "] = ", spec_.cardinalities[f], " does not fit Criteo's 32-bit ids");
  }
  CheckRange(first, count);

  FilePtr file(std::fopen(path.c_str(), "w"));
  if (!file) Throw(StatusCode::kIo, "cannot write ", path, ": ", std::strerror(errno));
  std::vector<double> probabilities(static_cast<size_t>(count));
  std::vector<float> labels(static_cast<size_t>(count));

  // Samples are independent, so chunks are generated and formatted in parallel and
  // written in order; a round of chunks bounds the memory held at once.
  const int num_threads =
      static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, kMaxTsvThreads));
  ThreadPool pool(num_threads);
  const int64_t chunks_per_round = 4 * num_threads;
  std::vector<std::string> texts(static_cast<size_t>(chunks_per_round));
  for (int64_t round = 0; round < count; round += chunks_per_round * kTsvChunk) {
    const int64_t round_end = std::min(count, round + chunks_per_round * kTsvChunk);
    const int64_t num_chunks = (round_end - round + kTsvChunk - 1) / kTsvChunk;
    pool.ParallelFor(num_chunks, [&](int64_t c) {
      std::string& text = texts[c];
      text.clear();
      const int64_t begin = round + c * kTsvChunk;
      const int64_t end = std::min(round_end, begin + kTsvChunk);
      for (int64_t b = begin; b < end; ++b) {
        const SyntheticSample sample = Sample(first + b);
        probabilities[b] = sample.probability;
        labels[b] = sample.label;
        text.push_back(sample.label > 0.5f ? '1' : '0');
        for (const int64_t v : sample.dense_counts)
          AppendField(&text, static_cast<uint64_t>(v), 10);
        for (const int64_t id : sample.ids)
          AppendField(&text, static_cast<uint64_t>(id), 16, spec_.raw_ids ? 16 : 8);
        text.push_back('\n');
      }
    });
    for (int64_t c = 0; c < num_chunks; ++c) {
      const std::string& text = texts[c];
      if (std::fwrite(text.data(), 1, text.size(), file.get()) != text.size())
        Throw(StatusCode::kIo, "cannot write ", path, ": ", std::strerror(errno));
    }
  }
  // fclose flushes the last buffer, so its result is the last write's result.
  const int close_result = std::fclose(file.release());
  if (close_result != 0) Throw(StatusCode::kIo, "cannot write ", path, ": ", std::strerror(errno));
  return RocAuc(probabilities, labels);
}

}  // namespace dlrm
