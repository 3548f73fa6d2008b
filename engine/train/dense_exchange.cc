#include "engine/train/dense_exchange.h"

#include <utility>

#include "engine/core/status.h"
#include "engine/core/tree_reduce.h"
#include "engine/embedding/wire_values.h"
#include "engine/train/step.h"

namespace dlrm::train {

namespace {

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

void CheckSyncPartSize(int64_t samples, int64_t chunk_rows) {
  if (samples % chunk_rows != 0 || !IsPowerOfTwo(samples / chunk_rows))
    ThrowInvalid("sync training needs each trainer's part to be a power-of-two number of ",
                 "reduction chunks (reduction_chunk_rows ", chunk_rows, " x 1, 2, 4, ...), got ",
                 samples, " samples");
}

void CheckEqualParts(const std::vector<int64_t>& samples, int64_t step) {
  for (size_t r = 0; r < samples.size(); ++r)
    if (samples[r] != samples[0])
      ThrowInvalid("step ", step, ": trainer ", r, " has ", samples[r], " samples, trainer 0 has ",
                   samples[0], " (parts must be equal)");
}

void Outcome::Rethrow() const {
  if (!ok()) Throw(static_cast<StatusCode>(code), error);
}

void PutOutcome(const Outcome& o, ByteWriter* out) {
  out->Put<int32_t>(o.code);
  out->PutString(o.error);
}

Outcome GetOutcome(ByteReader* in) {
  Outcome o;
  o.code = in->Get<int32_t>("error code");
  if (o.code != 0 && !IsErrorCode(o.code))
    Throw(StatusCode::kDataLoss, in->context(), ": error code ", o.code, " is not a status code");
  o.error = in->GetString("error");
  return o;
}

void PutBags(const OwnedBatch& bags, ByteWriter* out) {
  out->Put<int64_t>(bags.batch_size);
  out->Put<int32_t>(bags.num_sparse);
  out->PutArray(bags.lengths);
  out->PutIndices(bags.ids);
  out->PutArray(bags.weights);
}

OwnedBatch GetBags(ByteReader* in) {
  OwnedBatch bags;
  bags.batch_size = in->Get<int64_t>("batch size");
  bags.num_sparse = in->Get<int32_t>("feature count");
  in->GetArray("lengths", &bags.lengths);
  in->GetIndices("ids", &bags.ids);
  in->GetArray("weights", &bags.weights);
  return bags;
}

void CheckOutcome(const Outcome& o, int32_t rank, const char* doing) {
  if (!o.ok())
    Throw(static_cast<StatusCode>(o.code), "trainer ", rank, " failed ", doing, ": ", o.error);
}

void EncodeContribution(const Contribution& c, const std::vector<float>& dense_grad,
                        config::TableConfig::Precision wire, std::vector<uint16_t>* scratch,
                        ByteWriter* out) {
  out->Reserve(out->bytes().size() + 64 + c.outcome.error.size() +
               dense_grad.size() * sizeof(float) + c.replica_update.size());
  out->Put<int64_t>(c.samples);
  PutOutcome(c.outcome, out);
  if (!c.outcome.ok()) return;
  out->Put<double>(c.loss_sum);
  out->Put<uint8_t>(c.finite ? 1 : 0);
  PutWireValues(dense_grad.data(), dense_grad.size(), wire, scratch, out);
  out->PutString(c.replica_update);
}

void DecodeContribution(ByteReader* in, config::TableConfig::Precision wire,
                        std::vector<uint16_t>* scratch, Contribution* c) {
  c->samples = in->Get<int64_t>("samples");
  c->outcome = GetOutcome(in);
  if (!c->outcome.ok()) return;
  c->loss_sum = in->Get<double>("loss");
  c->finite = in->Get<uint8_t>("finite flag") == 1;
  GetWireValues(in, "dense gradient", wire, scratch, &c->dense_grad);
  c->replica_update = in->GetString("replica update");
}

void CheckContributions(const std::vector<Contribution>& by_rank, int64_t step, size_t num_params) {
  const auto ranks = static_cast<int32_t>(by_rank.size());
  for (int32_t r = 0; r < ranks; ++r) {
    const Contribution& c = by_rank[r];
    if (!c.outcome.ok())
      Throw(static_cast<StatusCode>(c.outcome.code), "step ", step, ": trainer ", r,
            "'s part: ", c.outcome.error);
  }
  std::vector<int64_t> samples;
  for (const Contribution& c : by_rank) samples.push_back(c.samples);
  CheckEqualParts(samples, step);
  for (int32_t r = 0; r < ranks; ++r) {
    const Contribution& c = by_rank[r];
    if (c.dense_grad.size() != num_params)
      Throw(StatusCode::kDataLoss, "sync step: trainer ", r, " sent ", c.dense_grad.size(),
            " gradient values, expected ", num_params);
  }
}

double ReduceContributions(std::vector<Contribution>& by_rank, int64_t step, ThreadPool* pool) {
  const auto ranks = static_cast<int32_t>(by_rank.size());
  std::vector<float*> grad_ptrs;
  std::vector<double> losses(ranks);
  std::vector<double*> loss_ptrs;
  bool finite = true;
  for (int32_t r = 0; r < ranks; ++r) {
    grad_ptrs.push_back(by_rank[r].dense_grad.data());
    losses[r] = by_rank[r].loss_sum;
    loss_ptrs.push_back(&losses[r]);
    finite &= by_rank[r].finite;
  }
  TreeReduceInto(grad_ptrs, by_rank[0].dense_grad.size(), pool);
  TreeReduceInto(loss_ptrs, 1, nullptr);
  const int64_t global_batch = by_rank[0].samples * ranks;
  const double loss = losses[0] / static_cast<double>(global_batch);
  CheckFinite(step, loss, by_rank[0].dense_grad, finite);
  return loss;
}

EvalResult GatherEvaluation(collective::Communicator* comm, const std::string& error,
                            const std::vector<double>& probabilities,
                            const std::vector<float>& labels) {
  ByteWriter out;
  out.PutString(error);
  out.PutArray(probabilities);
  out.PutArray(labels);
  const std::vector<std::string> all = comm->AllGather(std::move(out).Take());
  std::vector<double> all_probabilities;
  std::vector<float> all_labels;
  for (size_t r = 0; r < all.size(); ++r) {
    ByteReader in(all[r], "evaluation exchange");
    const std::string failed = in.GetString("error");
    if (!failed.empty()) ThrowInvalid("evaluation on trainer ", r, ": ", failed);
    const std::vector<double> p = in.GetArray<double>("probabilities");
    const std::vector<float> l = in.GetArray<float>("labels");
    in.ExpectEnd();
    if (p.size() != l.size())
      Throw(StatusCode::kDataLoss, "evaluation exchange: trainer ", r, " sent ", p.size(),
            " predictions for ", l.size(), " labels");
    all_probabilities.insert(all_probabilities.end(), p.begin(), p.end());
    all_labels.insert(all_labels.end(), l.begin(), l.end());
  }
  return Evaluation(all_probabilities, all_labels);
}

}  // namespace dlrm::train
