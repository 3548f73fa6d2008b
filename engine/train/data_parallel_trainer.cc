#include "engine/train/data_parallel_trainer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/byte_codec.h"
#include "engine/core/finite.h"
#include "engine/core/status.h"
#include "engine/core/tree_reduce.h"
#include "engine/dense/loss.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/wire_values.h"
#include "engine/ps/messages.h"
#include "engine/train/dense_exchange.h"
#include "engine/train/fetched_rows.h"
#include "engine/train/step.h"

namespace dlrm::train {
struct DataParallelTrainer::Prepared {
  OwnedBatch batch;
  ValidatedBatch validated;                    // views `batch`
  Outcome outcome;                             // not ok: why the part cannot be trained
  int64_t step = 0;                            // the step its lookups were submitted for
  bool training = false;                       // a step's part (its servers get its update)
  std::vector<std::vector<int64_t>> distinct;  // per table: the part's ids, sorted, unique
  // Where a shard's rows go: one entry per shard the part reads.
  struct Placement {
    int32_t table;
    int32_t shard;  // in its owner's store
    int32_t col_begin, col_end;
    int64_t first, count;  // the ids distinct[table][first, first + count)
  };
  std::vector<std::vector<Placement>> placements;           // per server, one per ShardRows asked
  std::vector<Placement> replica_placements;                // read at train time (see GatherRows)
  std::vector<std::unique_ptr<ps::PendingLookup>> lookups;  // per server; null: nothing asked
  // Per server: this rank's update of its features, made with the gradients (ComputePart)
  // and sent once the step is applied (ApplyUpdates).
  std::vector<std::vector<ps::FeatureUpdate>> server_updates;
};

DataParallelTrainer::DataParallelTrainer(const config::DlrmConfig& config,
                                         const shard::ShardingPlan& plan,
                                         collective::Communicator* comm,
                                         ps::EmbeddingService* service, ThreadPool* pool,
                                         const TrainerBackendFactory& make_backend)
    : config_(config),
      wire_(WireValuePrecision(config.distributed())),
      comm_(comm),
      service_(service),
      pool_(pool),
      model_(config, pool, /*allocate_tables=*/false),
      dense_optimizer_(
          MakeDenseOptimizer<float>(config.dense_optimizer(), model_.dense_params().size())),
      backend_(MakeTrainerBackend(make_backend, config, &model_, pool)),
      replicas_(config, plan, ps::kTrainerReplica, pool),
      locations_(ps::LocateShards(config.model(), plan)) {
  if (comm_ == nullptr || service_ == nullptr)
    ThrowInvalid("sync trainer: communicator and embedding service are required");
  server_features_.resize(plan.num_servers());
  const config::ModelConfig& model = config.model();
  for (int32_t f = 0; f < model.sparse_features_size(); ++f) {
    const int32_t t = FindTable(model, model.sparse_features(f).table());
    for (const ps::ShardLocation& loc : locations_[t]) {
      if (loc.owner == ps::kTrainerReplica) continue;
      std::vector<int32_t>& features = server_features_[loc.owner];
      if (features.empty() || features.back() != f) features.push_back(f);
    }
  }
  for (const config::TableConfig& tc : model.tables())
    fetched_.emplace_back(tc.name(), 1, tc.dim());
}

DataParallelTrainer::~DataParallelTrainer() = default;

std::unique_ptr<DataParallelTrainer::Prepared> DataParallelTrainer::Prepare(const BatchView& part,
                                                                            int64_t step,
                                                                            bool training) {
  auto p = std::make_unique<Prepared>();
  p->step = step;
  p->training = training;
  try {
    ValidatedBatch checked =
        ValidateBatch(part, model_.num_dense_features(), model_.feature_specs(), training);
    if (training) CheckSyncPartSize(part.batch_size, model_.chunk_rows());
    p->batch = CopyBatch(part);
    p->validated = std::move(checked);
    p->validated.view = p->batch.view();

    const BatchView& view = p->validated.view;
    p->distinct.assign(config_.model().tables_size(), {});
    const std::vector<FeatureBinding>& bindings = model_.feature_bindings();
    for (int32_t f = 0; f < view.num_sparse; ++f) {
      std::vector<int64_t>& ids = p->distinct[bindings[f].table];
      ids.insert(ids.end(), view.ids + p->validated.bag_begin(f, 0),
                 view.ids + p->validated.bag_begin(f + 1, 0));
    }
    for (std::vector<int64_t>& ids : p->distinct) {
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
    SubmitLookups(*p);
  } catch (const Error& e) {
    p->outcome = Outcome::Of(e);
  }
  return p;
}

void DataParallelTrainer::SubmitLookups(Prepared& p) {
  const size_t servers = server_features_.size();
  std::vector<std::vector<ps::ShardRows>> requests(servers);
  p.placements.assign(servers, {});
  p.replica_placements.clear();
  p.lookups.clear();
  p.lookups.resize(servers);
  for (int32_t t = 0; t < static_cast<int32_t>(p.distinct.size()); ++t) {
    const std::vector<int64_t>& ids = p.distinct[t];
    for (const ps::ShardLocation& loc : locations_[t]) {
      const auto lo = std::lower_bound(ids.begin(), ids.end(), loc.row_begin);
      const auto hi = std::lower_bound(ids.begin(), ids.end(), loc.row_end);
      if (lo == hi) continue;
      const Prepared::Placement where{t,
                                      loc.index,
                                      loc.col_begin,
                                      loc.col_end,
                                      static_cast<int64_t>(lo - ids.begin()),
                                      static_cast<int64_t>(hi - lo)};
      if (loc.owner == ps::kTrainerReplica) {
        p.replica_placements.push_back(where);
        continue;
      }
      ps::ShardRows request;
      request.shard = loc.index;
      request.ids.assign(lo, hi);
      requests[loc.owner].push_back(std::move(request));
      p.placements[loc.owner].push_back(where);
    }
  }
  // A step's part asks every server it will update, if for no rows: the answer (once step
  // - 1 - staleness is applied there) is what lets this rank's update follow (shard_owner.h).
  for (size_t s = 0; s < servers; ++s) {
    if (requests[s].empty() && !(p.training && !server_features_[s].empty())) continue;
    p.lookups[s] = service_->SubmitLookup(static_cast<int32_t>(s), p.step, std::move(requests[s]));
  }
}

namespace {

// rows (where.count rows of the placement's columns) into the fetched table's rows from
// where.first on, at its columns.
template <typename Placement>
void PlaceRows(const Placement& where, const std::vector<float>& rows,
               std::vector<EmbeddingTable<float>>& fetched) {
  PlaceFetchedRows(rows.data(), where.count, where.col_end - where.col_begin, where.col_begin,
                   where.first, &fetched[where.table]);
}

}  // namespace

ValidatedBatch DataParallelTrainer::GatherRows(Prepared& p) {
  for (size_t t = 0; t < fetched_.size(); ++t)
    GrowFetchedTable(&fetched_[t], static_cast<int64_t>(p.distinct[t].size()));
  // Replicated tables: this rank's own copy, read now (after the previous step's update).
  std::vector<float> rows;
  for (const Prepared::Placement& where : p.replica_placements) {
    rows.resize(where.count * (where.col_end - where.col_begin));
    replicas_.Lookup(where.shard, p.distinct[where.table].data() + where.first, where.count,
                     rows.data());
    PlaceRows(where, rows, fetched_);
  }
  PlaceServedRows(p);
  return Reindexed(p);
}

// Served tables: the answers to the lookups submitted when the part was queued.
void DataParallelTrainer::PlaceServedRows(Prepared& p) {
  for (size_t s = 0; s < p.lookups.size(); ++s) {
    if (!p.lookups[s]) continue;
    std::vector<ps::ShardRows> answers = p.lookups[s]->Wait();
    p.lookups[s].reset();
    const std::vector<Prepared::Placement>& where = p.placements[s];
    if (answers.size() != where.size())
      Throw(StatusCode::kDataLoss, "server ", s, " answered ", answers.size(), " shard lookups, ",
            where.size(), " were asked");
    for (size_t i = 0; i < answers.size(); ++i) {
      const int32_t width = where[i].col_end - where[i].col_begin;
      if (answers[i].rows.size() != static_cast<size_t>(where[i].count) * width)
        Throw(StatusCode::kDataLoss, "server ", s, " answered ", answers[i].rows.size(),
              " values for ", where[i].count, " rows of width ", width);
      // As a 16-bit wire delivers them (a server's answer already is; an in-process
      // service's is not): every trainer sees the same rows either way.
      RoundForWire(&answers[i].rows, wire_);
      PlaceRows(where[i], answers[i].rows, fetched_);
    }
  }
}

// The part re-indexed into the fetched rows.
ValidatedBatch DataParallelTrainer::Reindexed(const Prepared& p) {
  const BatchView& view = p.validated.view;
  const std::vector<FeatureBinding>& bindings = model_.feature_bindings();
  local_ids_.assign(view.ids, view.ids + view.num_ids);
  for (int32_t f = 0; f < view.num_sparse; ++f) {
    const std::vector<int64_t>& ids = p.distinct[bindings[f].table];
    for (int64_t i = p.validated.bag_begin(f, 0); i < p.validated.bag_begin(f + 1, 0); ++i)
      local_ids_[i] = std::lower_bound(ids.begin(), ids.end(), view.ids[i]) - ids.begin();
  }
  ValidatedBatch local = p.validated;
  local.view.ids = local_ids_.data();
  return local;
}

std::vector<ps::FeatureUpdate> DataParallelTrainer::UpdatesFor(const std::vector<int32_t>& features,
                                                               const ValidatedBatch& batch) const {
  return ps::FeatureUpdatesOf(features, batch, model_.feature_bindings(), config_.model(),
                              d_pooled_.data(), model_.pooled_width());
}

void DataParallelTrainer::Enqueue(const BatchView& part) {
  const int64_t step = step_ + 1 + static_cast<int64_t>(queue_.size());
  queue_.push_back(Prepare(part, step, /*training=*/true));
}

float DataParallelTrainer::TrainStep(const BatchView& part) {
  if (!queue_.empty())
    Throw(StatusCode::kFailedPrecondition, "sync trainer: ", queue_.size(),
          " parts are queued; TrainStep(part) is for unqueued use, call TrainStep()");
  Enqueue(part);
  return TrainStep();
}

void DataParallelTrainer::RenumberQueue() {
  int64_t step = step_ + 1;
  for (const std::unique_ptr<Prepared>& p : queue_) {
    if (p->step != step && p->outcome.ok()) {
      // Abandon the lookups sent for the wrong step (their answers are dropped).
      p->lookups.clear();
      p->step = step;
      p->outcome = Attempt([&] { SubmitLookups(*p); });
    }
    p->step = step++;
  }
}

float DataParallelTrainer::TrainStep() {
  if (queue_.empty())
    Throw(StatusCode::kFailedPrecondition, "sync trainer: no part queued (call Enqueue)");
  std::unique_ptr<Prepared> p = std::move(queue_.front());
  queue_.pop_front();
  // 1-2. Rows, then this part's forward/backward; any failure becomes this rank's error.
  // 3. One exchange: everybody's readiness, loss and gradient subtree.
  std::vector<Contribution>* by_rank = nullptr;
  double loss = 0;
  try {  // (a peer's bytes that do not decode fail the step as a bad part would)
    by_rank = &Exchange(ComputePart(*p));
    CheckContributions(*by_rank, step_ + 1, model_.dense_params().size());
    loss = ReduceContributions(*by_rank, step_, pool_);
  } catch (const Error&) {
    RenumberQueue();
    throw;
  }
  // 4. The updates: dense, the replicas' from every rank's part, then the servers'.
  ApplyUpdates(*p, *by_rank);
  return static_cast<float>(loss);
}

Contribution DataParallelTrainer::ComputePart(Prepared& p) {
  Contribution mine;
  mine.outcome = p.outcome;
  if (!mine.outcome.ok()) return mine;
  mine.samples = p.batch.batch_size;
  try {
    const ValidatedBatch local = GatherRows(p);
    CountLookupBytes(p);
    mine.loss_sum = backend_->ForwardBackward(local, mine.samples * comm_->world_size(), fetched_,
                                              &dense_grad_, &d_pooled_);
    RoundForWire(&d_pooled_, wire_);  // this rank's own gradients, as the others see them
    RoundForWire(&dense_grad_, wire_);
    mine.finite = AllFinite(d_pooled_);
    if (!replicas_.features().empty())
      mine.replica_update =
          ps::EncodeFeatureUpdates(UpdatesFor(replicas_.features(), p.validated), wire_);
    MakeServerUpdates(p);
  } catch (const Error& e) {
    mine.outcome = Outcome::Of(e);
  }
  return mine;
}

void DataParallelTrainer::MakeServerUpdates(Prepared& p) const {
  p.server_updates.assign(server_features_.size(), {});
  for (size_t owner = 0; owner < server_features_.size(); ++owner) {
    if (server_features_[owner].empty()) continue;
    p.server_updates[owner] = UpdatesFor(server_features_[owner], p.validated);
    // Refused here, where the error fails the step on every rank before anything changes,
    // rather than when sent, after the dense update.
    const int64_t bytes = ps::FeatureUpdatesBytes(p.server_updates[owner], wire_);
    if (bytes > service_->max_update_bytes())
      ThrowInvalid("this part's update for server ", owner, " is ", bytes,
                   " bytes, more than one message may carry (", service_->max_update_bytes(),
                   "): send smaller parts");
  }
}

std::vector<Contribution>& DataParallelTrainer::Exchange(Contribution mine) {
  const int32_t ranks = comm_->world_size();
  ByteWriter out(std::move(send_buffer_));
  EncodeContribution(mine, dense_grad_, wire_, &wire_values_, &out);
  std::string bytes = std::move(out).Take();
  const std::vector<std::string> all = comm_->AllGather(bytes);
  send_buffer_ = std::move(bytes);
  if (static_cast<int32_t>(all.size()) != ranks)
    Throw(StatusCode::kDataLoss, "sync step: ", all.size(), " contributions for ", ranks, " ranks");
  for (int32_t r = 0; r < ranks; ++r) {
    const auto size = static_cast<int64_t>(all[r].size());
    if (r == comm_->rank())
      wire_bytes_.sent += size * (ranks - 1);
    else
      wire_bytes_.received += size;
  }
  // Into last step's buffers (no per-step allocation of the gradients); this rank's own
  // contribution is taken as it is, not decoded from its bytes.
  exchange_.resize(ranks);
  const int32_t me = comm_->rank();
  for (int32_t r = 0; r < ranks; ++r) {
    if (r != me) {
      ByteReader in(all[r], "trainer exchange");
      DecodeContribution(&in, wire_, &wire_values_, &exchange_[r]);
      in.ExpectEnd();
      continue;
    }
    std::vector<float> grad_buffer = std::move(exchange_[r].dense_grad);
    exchange_[r] = std::move(mine);
    exchange_[r].dense_grad.swap(dense_grad_);
    dense_grad_ = std::move(grad_buffer);  // recycled: the next backward overwrites it
  }
  return exchange_;
}

void DataParallelTrainer::ApplyUpdates(Prepared& p, const std::vector<Contribution>& by_rank) {
  const auto ranks = static_cast<int32_t>(by_rank.size());
  const int64_t global_batch = by_rank[0].samples * ranks;
  const StepRates rates =
      RatesForStep(config_.lr_schedule(), config_.dense_optimizer().learning_rate(),
                   config_.sparse_optimizer().learning_rate(), step_);
  // Every trainer holds the same parameters, replicas and sums: they all refuse, or none
  // does. The replicas' parts are decoded (a bad one throws with the state untouched) and
  // the dense update is checked, then the replicas' update checks and applies itself (it
  // writes nothing when it throws), and only then is the dense update written.
  std::vector<std::vector<ps::FeatureUpdate>> replica_parts;
  try {
    for (int32_t r = 0; r < ranks && !replicas_.features().empty(); ++r)
      replica_parts.push_back(ps::DecodeFeatureUpdates(by_rank[r].replica_update));
    if (!DenseUpdateIsFinite(*dense_optimizer_, model_.dense_params(), by_rank[0].dense_grad.data(),
                             rates, pool_))
      ThrowUpdateNotFinite(rates);
    if (!replica_parts.empty())
      replicas_.ApplyUpdate(ps::ConcatenateRanks(replica_parts), global_batch, rates.sparse_lr,
                            rates.t);
  } catch (const Error&) {
    RenumberQueue();
    throw;
  }
  UpdateDense(*dense_optimizer_, model_.dense_params(), by_rank[0].dense_grad.data(), rates, pool_);
  backend_->ParametersChanged();
  step_ = rates.t;
  ++wire_bytes_.steps;
  // Each part fits a message (MakeServerUpdates): a send fails only with the transport,
  // which leaves the step incomplete on that server, and the job with it.
  for (int32_t owner = 0; owner < static_cast<int32_t>(server_features_.size()); ++owner) {
    if (server_features_[owner].empty()) continue;
    std::vector<ps::FeatureUpdate>& part = p.server_updates[owner];
    wire_bytes_.sent += ps::FeatureUpdatesBytes(part, wire_);
    service_->Update(owner, comm_->rank(), rates.t, rates.sparse_lr, std::move(part));
  }
}

void DataParallelTrainer::CountLookupBytes(const Prepared& p) {
  const int64_t value_bytes = IsHalf(wire_) ? 2 : 4;
  for (const std::vector<Prepared::Placement>& server : p.placements) {
    int64_t ids = 0, max_id = 0;  // a placement's ids are sorted: its largest is its last
    for (const Prepared::Placement& where : server) {
      ids += where.count;
      if (where.count > 0)
        max_id = std::max(max_id, p.distinct[where.table][where.first + where.count - 1]);
      wire_bytes_.received += where.count * (where.col_end - where.col_begin) * value_bytes;
    }
    wire_bytes_.sent += ids * ps::LookupIdBytes(max_id);
  }
}

void DataParallelTrainer::Flush() { service_->WaitUntilApplied(step_); }

void DataParallelTrainer::PredictLogits(const BatchView& batch, float* logits) {
  if (logits == nullptr) ThrowInvalid("logits is NULL");
  Flush();
  PredictFlushed(batch, logits);
}

void DataParallelTrainer::PredictFlushed(const BatchView& batch, float* logits) {
  std::unique_ptr<Prepared> p = Prepare(batch, step_ + 1, /*training=*/false);
  p->outcome.Rethrow();
  const ValidatedBatch local = GatherRows(*p);
  backend_->PredictLogits(local, fetched_, logits);
}

void DataParallelTrainer::AppendPredictions(const std::vector<BatchView>& batches, size_t first,
                                            size_t stride, std::vector<double>* probabilities,
                                            std::vector<float>* labels) {
  if (batches.empty()) ThrowInvalid("evaluate needs at least one batch");
  Flush();  // once: every batch sees the same, fully applied rows
  std::vector<float> logits;
  for (size_t i = first; i < batches.size(); i += stride) {
    const BatchView& b = batches[i];
    if (b.labels == nullptr) ThrowInvalid("batches[", i, "]: labels are required");
    logits.resize(std::max<int64_t>(0, b.batch_size));
    try {
      PredictFlushed(b, logits.data());
    } catch (const Error& e) {
      Throw(e.code(), "batches[", i, "]: ", e.what());
    }
    for (int64_t j = 0; j < b.batch_size; ++j) {
      probabilities->push_back(StableSigmoid(static_cast<double>(logits[j])));
      labels->push_back(b.labels[j]);
    }
  }
}

EvalResult DataParallelTrainer::Evaluate(const std::vector<BatchView>& batches) {
  std::vector<double> probabilities;
  std::vector<float> labels;
  AppendPredictions(batches, 0, 1, &probabilities, &labels);
  return Evaluation(probabilities, labels);
}

void DataParallelTrainer::set_step(int64_t step) {
  CheckSetStep("sync trainer", queue_.size(), step);
  step_ = step;
}

}  // namespace dlrm::train
