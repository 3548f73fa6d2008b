// What each rank of a synchronous step contributes to its exchange, and what every rank
// then does with all of them (and the evaluation's exchange), written once for the two
// trainers (data_parallel_trainer.h, model_parallel_trainer.h): whether the rank could
// train its part (or why not), its loss sum, its dense gradient (the part's subtree of the
// global batch's reduction tree) and the replicated tables' update; and the encodings of
// what else travels between ranks (an outcome, a part's bags). Every rank decodes the same
// bytes and sums them in one fixed tree, so all ranks hold the same bits and the
// single-process association is kept. Peers' bytes are untrusted: tests/fuzz/fuzz_exchange
// feeds these decoders, and what follows them, arbitrary input.
//
// Threading: functions over the caller's data. Errors: decoding a peer's bytes is
// kDataLoss naming the field; the checks throw the first failed rank's error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/byte_codec.h"
#include "engine/core/metrics.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"

namespace dlrm::train {

// A rank's part of a collective phase: done (code 0), or the Error that stopped it, which
// travels (an int32 code, then the message: PutOutcome) so that every rank fails with it
// instead of waiting for a rank that left the phase.
struct Outcome {
  int32_t code = 0;  // a StatusCode
  std::string error;
  bool ok() const { return code == 0; }
  static Outcome Of(const Error& e) { return {static_cast<int32_t>(e.code()), e.what()}; }
  // Throws the error as it is (its code and message) unless ok.
  void Rethrow() const;
};
// fn() run; an Error it throws becomes the outcome.
template <typename Fn>
Outcome Attempt(Fn&& fn) {
  try {
    fn();
    return {};
  } catch (const Error& e) {
    return Outcome::Of(e);
  }
}
void PutOutcome(const Outcome& o, ByteWriter* out);
// kDataLoss naming the field for malformed bytes, and for a code that is not a StatusCode.
Outcome GetOutcome(ByteReader* in);
// Throws o's error with its code, naming trainer `rank` and what it was `doing`, unless ok.
void CheckOutcome(const Outcome& o, int32_t rank, const char* doing);

struct Contribution {
  int64_t samples = 0;
  Outcome outcome;  // ok: the rank trained its part
  double loss_sum = 0;
  bool finite = true;             // the part's pooled-embedding gradients
  std::vector<float> dense_grad;  // received; a rank's own travels separately (below)
  std::string replica_update;     // EncodeFeatureUpdates of the replicated tables' features
};

// kInvalidArgument unless a part of `samples` is a power-of-two number of reduction chunks
// of `chunk_rows` (what makes each rank's gradient a subtree of the global batch's tree).
void CheckSyncPartSize(int64_t samples, int64_t chunk_rows);

// kInvalidArgument naming the first rank whose part has another number of samples than
// rank 0's (samples[r]: rank r's), in step number `step`.
void CheckEqualParts(const std::vector<int64_t>& samples, int64_t step);

// Appends c, with `dense_grad` as its gradient (the sender's own buffer), in `wire`
// precision (BF16 / FP16: the values must already be rounded to it, so narrowing loses
// nothing). scratch: a reused buffer for the narrowed values.
void EncodeContribution(const Contribution& c, const std::vector<float>& dense_grad,
                        config::TableConfig::Precision wire, std::vector<uint16_t>* scratch,
                        ByteWriter* out);
// Reads what EncodeContribution wrote into *c (its buffers reused).
void DecodeContribution(ByteReader* in, config::TableConfig::Precision wire,
                        std::vector<uint16_t>* scratch, Contribution* c);

// A rank's bags for one owner in the model-parallel input exchange (sizes, lengths, ids,
// weights). GetBags: kDataLoss naming the field for malformed bytes; the bags' consistency
// is PooledLayout::JoinInput's to check.
void PutBags(const OwnedBatch& bags, ByteWriter* out);
OwnedBatch GetBags(ByteReader* in);

// The step's (number `step`) first failed rank's error, with its code; kInvalidArgument
// when the ranks' parts differ in size; kDataLoss for a gradient of another size than
// num_params.
void CheckContributions(const std::vector<Contribution>& by_rank, int64_t step, size_t num_params);

// Sums the ranks' dense gradients into by_rank[0].dense_grad and their losses in one fixed
// tree (rank order); returns the global batch's mean loss. kFailedPrecondition (nothing
// updated yet) when the loss or a gradient is not finite; `step` is the last step done.
double ReduceContributions(std::vector<Contribution>& by_rank, int64_t step, ThreadPool* pool);

// Collective: every rank's click probabilities and labels (or the error that kept it from
// predicting, thrown on every rank naming it), all-gathered in rank order; the same
// log loss and AUC on every rank.
EvalResult GatherEvaluation(collective::Communicator* comm, const std::string& error,
                            const std::vector<double>& probabilities,
                            const std::vector<float>& labels);

}  // namespace dlrm::train
