#include "engine/train/model_parallel_trainer.h"

#include <algorithm>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/byte_codec.h"
#include "engine/core/finite.h"
#include "engine/core/status.h"
#include "engine/dense/loss.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/wire_values.h"
#include "engine/ps/feature_update.h"
#include "engine/train/fetched_rows.h"
#include "engine/train/step.h"

namespace dlrm::train {

// A batch after the input exchange: this rank's own (dense features, labels) and what it
// pools: its owned features over every rank's samples, its replicated ones over its own.
struct ModelParallelTrainer::Input {
  Part mine;
  std::vector<int64_t> samples;  // per rank
  std::vector<int64_t> first;    // per rank: its first sample in `joined`
  OwnedBatch joined, local;
  ValidatedBatch joined_vb, local_vb;
  // Whether the bags and requests the ranks sent this one decode and fit its shards: an
  // error travels in phase 2's outcome, so that every rank fails with it.
  Outcome accepted;
};

// The tables cut into row-wise pieces (PooledLayout::fetched_tables(), index k): what this
// rank asks each piece's rank for, what it is asked, the rows it pools, the pieces' updates.
struct ModelParallelTrainer::Fetch {
  // Per table k: this rank's distinct ids, sorted, and where piece p's begin in them
  // (bounds[k][p]; bounds[k].back() is their count).
  std::vector<std::vector<int64_t>> distinct;
  std::vector<std::vector<size_t>> bounds;
  std::vector<EmbeddingTable<float>> rows;              // per k: the distinct ids' rows
  std::unique_ptr<EmbeddingBagCollection<float>> bags;  // the fetched slices over `rows`
  // The pieces this rank holds, in table order: k, its piece index and its owned_ shard.
  struct Held {
    int32_t table, piece, shard;
  };
  std::vector<Held> held;
  // asked[q][j]: the ids rank q asked of held[j]; answers[q][j]: their rows.
  std::vector<std::vector<std::vector<int64_t>>> asked;
  std::vector<std::vector<std::vector<float>>> answers;
  std::vector<std::string> updates;   // [r]: this rank's updates of range_features(r)
  std::vector<std::string> received;  // [q]: rank q's updates of this rank's pieces
};

const config::DlrmConfig& ModelParallelTrainer::Checked(const config::DlrmConfig& config,
                                                        const shard::ShardingPlan& plan,
                                                        const collective::Communicator* comm) {
  if (comm == nullptr) ThrowInvalid("model-parallel trainer: a communicator is required");
  if (StalenessBound(config.distributed()) != 0)
    ThrowInvalid("distributed.mode ",
                 config::DistributedConfig::Mode_Name(config.distributed().mode()),
                 " (stale embedding reads) needs embedding servers; trainers that own their "
                 "shards train in sync");
  if (comm->world_size() != plan.num_servers())
    ThrowInvalid("model-parallel trainer: the plan places shards on ", plan.num_servers(),
                 " ranks but the communicator has ", comm->world_size());
  return config;
}

ModelParallelTrainer::ModelParallelTrainer(const config::DlrmConfig& config,
                                           const shard::ShardingPlan& plan,
                                           collective::Communicator* comm, ThreadPool* pool,
                                           const TrainerDevices& devices)
    : config_(Checked(config, plan, comm)),
      wire_(WireValuePrecision(config.distributed())),
      comm_(comm),
      pool_(pool),
      layout_(config, plan, plan.num_servers()),
      model_(config, pool, /*allocate_tables=*/false),
      dense_optimizer_(
          MakeDenseOptimizer<float>(config.dense_optimizer(), model_.dense_params().size())),
      backend_(MakeTrainerBackend(devices.backend, config, &model_, pool)),
      owned_(config, plan, comm->rank(), pool, ps::ShardRoles::kPoolWholeRows),
      shards_(MakeOwnedShards(devices.owned, config, &owned_, pool)),
      replicas_(config, plan, ps::kTrainerReplica, pool),
      in_(std::make_unique<Input>()),
      fetch_(std::make_unique<Fetch>()) {
  // The stores pool and serve what the layout says this rank pools and serves.
  DLRM_INTERNAL_CHECK(owned_.pooled_features() == layout_.input_features(comm_->rank()));
  DLRM_INTERNAL_CHECK(owned_.pooled_width() == layout_.owned_width(comm_->rank()));
  DLRM_INTERNAL_CHECK(owned_.features() == layout_.range_features(comm_->rank()));
  DLRM_INTERNAL_CHECK(replicas_.pooled_width() == layout_.local_width());
  InitFetch();
}

void ModelParallelTrainer::InitFetch() {
  Fetch& f = *fetch_;
  const std::vector<shard::FetchedTable>& tables = layout_.fetched_tables();
  for (const shard::FetchedTable& t : tables) {
    const config::TableConfig& table = config_.model().tables(t.table);
    f.rows.emplace_back(table.name(), 1, table.dim());  // grown to the ids a step asks for
  }
  std::vector<FeatureBinding> bindings;
  for (const shard::PooledSlice& s : layout_.fetched_slices())
    bindings.push_back({s.shard, s.owned_column, s.mean});
  f.bags = std::make_unique<EmbeddingBagCollection<float>>(&f.rows, std::move(bindings),
                                                           layout_.fetched_width());
  const std::vector<ps::ShardLocation>& shards = owned_.shards();
  for (int32_t k = 0; k < static_cast<int32_t>(tables.size()); ++k) {
    for (int32_t p = 0; p < static_cast<int32_t>(tables[k].pieces.size()); ++p) {
      const shard::RowPiece& piece = tables[k].pieces[p];
      if (piece.rank != comm_->rank()) continue;
      const auto at = std::find_if(shards.begin(), shards.end(), [&](const ps::ShardLocation& s) {
        return s.table == tables[k].table && s.row_begin == piece.row_begin;
      });
      DLRM_INTERNAL_CHECK(at != shards.end() && at->row_end == piece.row_end);
      f.held.push_back({k, p, static_cast<int32_t>(at - shards.begin())});
    }
  }
  const auto ranks = static_cast<size_t>(comm_->world_size());
  f.asked.assign(ranks, std::vector<std::vector<int64_t>>(f.held.size()));
  f.answers.assign(ranks, std::vector<std::vector<float>>(f.held.size()));
  f.updates.assign(ranks, "");
  f.received.assign(ranks, "");
}

ModelParallelTrainer::~ModelParallelTrainer() = default;

std::vector<std::string> ModelParallelTrainer::AllToAll(const std::vector<std::string>& to_each) {
  std::vector<std::string> got = comm_->AllToAll(to_each);
  if (static_cast<int32_t>(got.size()) != comm_->world_size())
    Throw(StatusCode::kDataLoss, "model-parallel step: ", got.size(), " parts for ",
          comm_->world_size(), " ranks");
  if (counting_) {
    for (int32_t r = 0; r < comm_->world_size(); ++r) {
      if (r == comm_->rank()) continue;
      wire_bytes_.sent += static_cast<int64_t>(to_each[r].size());
      wire_bytes_.received += static_cast<int64_t>(got[r].size());
    }
  }
  return got;
}

ModelParallelTrainer::Part ModelParallelTrainer::Prepare(const BatchView* part,
                                                         Purpose purpose) const {
  Part p;
  if (part == nullptr) {
    p.present = false;
    return p;
  }
  try {
    ValidatedBatch checked = ValidateBatch(*part, model_.num_dense_features(),
                                           model_.feature_specs(), purpose != Purpose::kPredict);
    if (purpose == Purpose::kTrain) CheckSyncPartSize(part->batch_size, model_.chunk_rows());
    p.batch = CopyBatch(*part);
    p.validated = std::move(checked);
    p.validated.view = p.batch.view();
  } catch (const Error& e) {
    p.outcome = Outcome::Of(e);
  }
  return p;
}

void ModelParallelTrainer::Enqueue(const BatchView& part) {
  queue_.push_back(Prepare(&part, Purpose::kTrain));
}

float ModelParallelTrainer::TrainStep() {
  if (queue_.empty())
    Throw(StatusCode::kFailedPrecondition, "model-parallel trainer: no part queued (call Enqueue)");
  Part p = std::move(queue_.front());
  queue_.pop_front();
  return Train(std::move(p));
}

float ModelParallelTrainer::TrainStep(const BatchView& part) {
  if (!queue_.empty())
    Throw(StatusCode::kFailedPrecondition, "model-parallel trainer: ", queue_.size(),
          " parts are queued; TrainStep(part) is for unqueued use, call TrainStep()");
  return Train(Prepare(&part, Purpose::kTrain));
}

float ModelParallelTrainer::Train(Part part) {
  ExchangeInput(std::move(part), Purpose::kTrain);
  ExchangePooled();
  ExchangeGradients(ComputeDense());
  CheckContributions(exchange_, step_ + 1, model_.dense_params().size());
  const double loss = ReduceContributions(exchange_, step_, pool_);
  ApplyUpdates();
  return static_cast<float>(loss);
}

void ModelParallelTrainer::ExchangeInput(Part part, Purpose purpose) {
  counting_ = purpose == Purpose::kTrain;
  in_->mine = std::move(part);
  JoinInputParts(AllToAll(EncodeInputParts()), purpose);
}

std::vector<std::string> ModelParallelTrainer::EncodeInputParts() {
  const Part& mine = in_->mine;
  const int32_t ranks = comm_->world_size();
  Outcome outcome = mine.outcome;
  std::vector<OwnedBatch> parts(ranks);
  if (outcome.ok() && mine.present) {
    outcome = Attempt([&] { parts = layout_.SplitInput(mine.validated.view); });
  } else if (outcome.ok()) {  // no batch this round (Evaluate): empty parts
    for (int32_t r = 0; r < ranks; ++r)
      parts[r].num_sparse = static_cast<int32_t>(layout_.input_features(r).size());
  }
  if (outcome.ok()) CollectFetchIds();
  std::vector<std::string> to_each(ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    ByteWriter out;
    PutOutcome(outcome, &out);
    if (outcome.ok()) {
      PutBags(parts[r], &out);
      PutRowRequests(r, &out);
    }
    to_each[r] = std::move(out).Take();
  }
  return to_each;
}

void ModelParallelTrainer::JoinInputParts(const std::vector<std::string>& received,
                                          Purpose purpose) {
  Input& in = *in_;
  const int32_t ranks = comm_->world_size();
  std::vector<ByteReader> readers;
  readers.reserve(static_cast<size_t>(ranks));
  // A rank's own error (every rank reads the same one) fails the phase here, on every rank.
  for (int32_t r = 0; r < ranks; ++r) {
    readers.emplace_back(received[r], "model-parallel input");
    const Outcome got = GetOutcome(&readers.back());
    if (got.ok()) continue;
    const auto code = static_cast<StatusCode>(got.code);
    if (purpose == Purpose::kTrain)
      Throw(code, "step ", step_ + 1, ": trainer ", r, "'s part: ", got.error);
    Throw(code, "trainer ", r, "'s batch: ", got.error);
  }
  std::vector<OwnedBatch> parts(ranks);
  in.accepted = Attempt([&] {
    for (int32_t r = 0; r < ranks; ++r) {
      parts[r] = GetBags(&readers[r]);
      GetRowRequests(r, &readers[r]);
      readers[r].ExpectEnd();
    }
    // Sizes checked first (JoinInput's), then summed: a peer's could be anything.
    in.joined = layout_.JoinInput(comm_->rank(), parts);
    in.samples.assign(ranks, 0);
    in.first.assign(ranks, 0);
    for (int32_t r = 0; r < ranks; ++r) {
      in.samples[r] = parts[r].batch_size;
      if (r > 0) in.first[r] = in.first[r - 1] + in.samples[r - 1];
    }
    if (purpose == Purpose::kTrain) CheckEqualParts(in.samples, step_ + 1);
    in.joined_vb = owned_.ValidateLocalBatch(in.joined.view());
  });
  if (!in.mine.present) return;
  in.local = layout_.LocalInput(in.mine.validated.view);
  if (!replicas_.features().empty()) in.local_vb = replicas_.ValidateLocalBatch(in.local.view());
}

void ModelParallelTrainer::ExchangePooled() {
  const Input& in = *in_;
  const int32_t ranks = comm_->world_size(), me = comm_->rank();
  // A failure (input that does not fit this rank's shards, the device's, a request for
  // rows outside a piece) travels in place of the rows: every rank fails with it.
  Outcome done = in.accepted;
  if (done.ok()) {
    owned_out_.resize(static_cast<size_t>(in.joined.batch_size) * layout_.owned_width(me));
    done = Attempt([&] {
      shards_->Pool(in.joined_vb, owned_out_.data());
      AnswerRowRequests();
    });
  }
  // Rounded where made: every rank, this one included, sees the same bits.
  RoundForWire(&owned_out_, wire_);
  std::vector<std::string> to_each(ranks);
  for (int32_t q = 0; q < ranks; ++q)
    if (q != me) to_each[q] = EncodePooledFor(q, done);  // this rank's own are taken as they are
  const std::vector<std::string> received = AllToAll(to_each);
  std::vector<ByteReader> readers;
  readers.reserve(static_cast<size_t>(ranks));
  for (int32_t r = 0; r < ranks; ++r) {
    readers.emplace_back(received[r], "model-parallel pooled rows");
    CheckOutcome(r == me ? done : GetOutcome(&readers.back()), r, "pooling its shards");
  }
  const int64_t n = in.samples[me];
  if (n == 0) return;
  std::vector<std::vector<float>> blocks(ranks);
  for (int32_t r = 0; r < ranks; ++r) DecodePooledFrom(r, &readers[r], &blocks[r]);
  std::vector<float> local(static_cast<size_t>(n) * layout_.local_width());
  if (!replicas_.features().empty()) replicas_.Pool(in.local_vb, local.data());
  std::vector<float> fetched;
  PoolFetched(&fetched);
  pooled_.resize(static_cast<size_t>(n) * layout_.pooled_width());
  layout_.Assemble(blocks, local, fetched, n, pooled_.data());
}

std::string ModelParallelTrainer::EncodePooledFor(int32_t q, const Outcome& done) {
  const Input& in = *in_;
  const int32_t width = layout_.owned_width(comm_->rank());
  ByteWriter out;
  PutOutcome(done, &out);
  if (!done.ok()) return std::move(out).Take();
  PutWireValues(owned_out_.data() + in.first[q] * width, static_cast<size_t>(in.samples[q] * width),
                wire_, &wire_values_, &out);
  PutAnswers(q, &out);
  return std::move(out).Take();
}

void ModelParallelTrainer::DecodePooledFrom(int32_t r, ByteReader* in, std::vector<float>* block) {
  const Input& input = *in_;
  const int32_t me = comm_->rank(), width = layout_.owned_width(me);
  if (r == me) {
    const float* mine = owned_out_.data() + input.first[me] * width;
    block->assign(mine, mine + input.samples[me] * width);
  } else {
    GetWireValues(in, "pooled rows", wire_, &wire_values_, block);
  }
  PlaceRowsFrom(r, in);
  if (r != me) in->ExpectEnd();
}

// The row-wise pieces' requests, answers, pooling and updates (Fetch above).

void ModelParallelTrainer::CollectFetchIds() {
  Fetch& f = *fetch_;
  const std::vector<shard::FetchedTable>& tables = layout_.fetched_tables();
  const Part& mine = in_->mine;
  f.distinct.assign(tables.size(), {});
  f.bounds.assign(tables.size(), {});
  for (size_t k = 0; k < tables.size(); ++k) {
    std::vector<int64_t>& ids = f.distinct[k];
    for (const shard::PooledSlice& s : layout_.fetched_slices()) {
      if (!mine.present || s.shard != static_cast<int32_t>(k)) continue;
      const ValidatedBatch& vb = mine.validated;
      ids.insert(ids.end(), vb.view.ids + vb.bag_begin(s.feature, 0),
                 vb.view.ids + vb.bag_begin(s.feature + 1, 0));
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (const shard::RowPiece& piece : tables[k].pieces)
      f.bounds[k].push_back(std::lower_bound(ids.begin(), ids.end(), piece.row_begin) -
                            ids.begin());
    f.bounds[k].push_back(ids.size());
    GrowFetchedTable(&f.rows[k], static_cast<int64_t>(ids.size()));
  }
}

void ModelParallelTrainer::PutRowRequests(int32_t r, ByteWriter* out) const {
  const Fetch& f = *fetch_;
  const std::vector<shard::FetchedTable>& tables = layout_.fetched_tables();
  for (size_t k = 0; k < tables.size(); ++k) {
    for (size_t p = 0; p < tables[k].pieces.size(); ++p) {
      if (tables[k].pieces[p].rank != r) continue;
      const auto first = f.distinct[k].begin();
      out->PutIndices(std::vector<int64_t>(first + f.bounds[k][p], first + f.bounds[k][p + 1]));
    }
  }
}

void ModelParallelTrainer::GetRowRequests(int32_t r, ByteReader* in) {
  Fetch& f = *fetch_;
  for (size_t j = 0; j < f.held.size(); ++j) in->GetIndices("row-wise piece ids", &f.asked[r][j]);
}

namespace {

// kDataLoss naming rank q unless `ids` are distinct ascending rows of `piece` (what
// CollectFetchIds sends): a request is never larger than the piece.
void CheckRowRequest(int32_t q, const std::string& table, const shard::RowPiece& piece,
                     const std::vector<int64_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= piece.row_begin && ids[i] < piece.row_end && (i == 0 || ids[i] > ids[i - 1]))
      continue;
    Throw(StatusCode::kDataLoss, "trainer ", q, " asked for row ", ids[i], " (request entry ", i,
          ") of table \"", table, "\"'s piece [", piece.row_begin, ", ", piece.row_end,
          "); a request lists distinct rows of the piece in ascending order");
  }
}

}  // namespace

void ModelParallelTrainer::AnswerRowRequests() {
  Fetch& f = *fetch_;
  for (int32_t q = 0; q < comm_->world_size(); ++q) {
    for (size_t j = 0; j < f.held.size(); ++j) {
      const std::vector<int64_t>& ids = f.asked[q][j];
      const int32_t shard = f.held[j].shard;
      const shard::FetchedTable& table = layout_.fetched_tables()[f.held[j].table];
      CheckRowRequest(q, owned_.shard_table(shard).name(), table.pieces[f.held[j].piece], ids);
      std::vector<float>& rows = f.answers[q][j];
      rows.resize(ids.size() * static_cast<size_t>(owned_.shard_table(shard).dim()));
      owned_.Lookup(shard, ids.data(), static_cast<int64_t>(ids.size()), rows.data());
      RoundForWire(&rows, wire_);  // as every rank, this one included, receives them
    }
  }
}

void ModelParallelTrainer::PutAnswers(int32_t q, ByteWriter* out) {
  for (const std::vector<float>& rows : fetch_->answers[q])
    PutWireValues(rows.data(), rows.size(), wire_, &wire_values_, out);
}

void ModelParallelTrainer::PlaceRowsFrom(int32_t r, ByteReader* in) {
  Fetch& f = *fetch_;
  const std::vector<shard::FetchedTable>& tables = layout_.fetched_tables();
  size_t held = 0;  // rank r == this rank: its answers to itself, in held order
  std::vector<float> received;
  for (size_t k = 0; k < tables.size(); ++k) {
    for (size_t p = 0; p < tables[k].pieces.size(); ++p) {
      if (tables[k].pieces[p].rank != r) continue;
      if (r != comm_->rank())
        GetWireValues(in, "row-wise piece rows", wire_, &wire_values_, &received);
      const std::vector<float>& rows = r == comm_->rank() ? f.answers[r][held++] : received;
      const size_t first = f.bounds[k][p], count = f.bounds[k][p + 1] - first;
      const auto dim = static_cast<size_t>(f.rows[k].dim());
      if (rows.size() != count * dim)
        Throw(StatusCode::kDataLoss, "model-parallel step: trainer ", r, " sent ", rows.size(),
              " values of table \"", f.rows[k].name(), "\" for ", count, " rows of ", dim);
      PlaceFetchedRows(rows.data(), static_cast<int64_t>(count), static_cast<int32_t>(dim), 0,
                       static_cast<int64_t>(first), &f.rows[k]);
    }
  }
}

void ModelParallelTrainer::PoolFetched(std::vector<float>* fetched) {
  const Fetch& f = *fetch_;
  const ValidatedBatch& mine = in_->mine.validated;
  const int64_t n = mine.view.batch_size;
  const int32_t width = layout_.fetched_width();
  fetched->assign(static_cast<size_t>(n) * width, 0.0f);
  if (width == 0) return;
  OwnedBatch input = layout_.FetchedInput(mine.view);
  std::vector<SparseFeatureSpec> specs;
  int64_t at = 0;  // the input's ids, feature by feature, renumbered into the fetched rows
  for (int32_t j = 0; j < input.num_sparse; ++j) {
    const int32_t k = layout_.fetched_slices()[j].shard;
    const std::vector<int64_t>& ids = f.distinct[k];
    int64_t count = 0;
    for (int64_t b = 0; b < n; ++b) count += input.lengths[j * n + b];
    for (int64_t i = at; i < at + count; ++i)
      input.ids[i] = std::lower_bound(ids.begin(), ids.end(), input.ids[i]) - ids.begin();
    at += count;
    specs.push_back({k, static_cast<int64_t>(ids.size())});
  }
  f.bags->ForwardBatch(ValidateBatch(input.view(), 0, specs, false, pool_), fetched->data(), pool_);
}

void ModelParallelTrainer::EncodePieceUpdates(const ValidatedBatch& part) {
  for (int32_t r = 0; r < comm_->world_size(); ++r) {
    const std::vector<int32_t>& features = layout_.range_features(r);
    fetch_->updates[r] =
        features.empty()
            ? std::string()
            : ps::EncodeFeatureUpdates(
                  ps::FeatureUpdatesOf(features, part, model_.feature_bindings(), config_.model(),
                                       d_pooled_.data(), model_.pooled_width()),
                  wire_);
  }
}

bool ModelParallelTrainer::PieceUpdatesAreFinite(int64_t global_batch, const StepRates& rates) {
  if (layout_.range_features(comm_->rank()).empty()) return true;
  std::vector<std::vector<ps::FeatureUpdate>> parts;
  for (const std::string& bytes : fetch_->received)
    parts.push_back(ps::DecodeFeatureUpdates(bytes));
  return owned_.CheckUpdate(ps::ConcatenateRanks(parts), global_batch, rates.sparse_lr, rates.t);
}

Contribution ModelParallelTrainer::ComputeDense() {
  const Input& in = *in_;
  Contribution mine;
  mine.samples = in.mine.batch.batch_size;
  for (std::string& bytes : fetch_->updates) bytes.clear();
  try {
    mine.loss_sum =
        backend_->ForwardBackwardPooled(in.mine.validated, mine.samples * comm_->world_size(),
                                        pooled_.data(), &dense_grad_, &d_pooled_);
    RoundForWire(&d_pooled_, wire_);  // this rank's own gradients, as the others see them
    RoundForWire(&dense_grad_, wire_);
    mine.finite = AllFinite(d_pooled_);
    EncodePieceUpdates(in.mine.validated);
    if (!replicas_.features().empty())
      mine.replica_update = ps::EncodeFeatureUpdates(
          ps::FeatureUpdatesOf(replicas_.features(), in.mine.validated, model_.feature_bindings(),
                               config_.model(), d_pooled_.data(), model_.pooled_width()),
          wire_);
  } catch (const Error& e) {
    mine.outcome = Outcome::Of(e);
  }
  return mine;
}

void ModelParallelTrainer::ExchangeGradients(Contribution mine) {
  const Input& in = *in_;
  const int32_t ranks = comm_->world_size(), me = comm_->rank();
  std::vector<std::vector<float>> blocks(ranks);
  std::vector<float> local;  // the replicated tables' columns travel as mine.replica_update
  if (mine.outcome.ok()) blocks = layout_.Split(d_pooled_.data(), mine.samples, &local);
  // The contribution (its dense gradient) is encoded once and sent to every rank.
  ByteWriter contribution;
  EncodeContribution(mine, dense_grad_, wire_, &wire_values_, &contribution);
  std::vector<std::string> to_each(ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    if (r == me) continue;  // this rank's own block and contribution are taken as they are
    ByteWriter out;
    out.Reserve(contribution.bytes().size() + 2 * sizeof(uint64_t) +
                blocks[r].size() * sizeof(float) + fetch_->updates[r].size());
    out.bytes().append(contribution.bytes());
    PutWireValues(blocks[r].data(), blocks[r].size(), wire_, &wire_values_, &out);
    out.PutString(fetch_->updates[r]);
    to_each[r] = std::move(out).Take();
  }
  const std::vector<std::string> received = AllToAll(to_each);
  const int32_t width = layout_.owned_width(me);
  owned_grad_.resize(static_cast<size_t>(in.joined.batch_size) * width);
  exchange_.resize(ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    std::vector<float> block;
    if (r == me) {
      std::vector<float> grad_buffer = std::move(exchange_[r].dense_grad);
      exchange_[r] = std::move(mine);
      exchange_[r].dense_grad.swap(dense_grad_);
      dense_grad_ = std::move(grad_buffer);  // recycled: the next backward overwrites it
      block = std::move(blocks[r]);
      fetch_->received[r] = fetch_->updates[r];
    } else {
      ByteReader bytes(received[r], "model-parallel gradients");
      DecodeContribution(&bytes, wire_, &wire_values_, &exchange_[r]);
      GetWireValues(&bytes, "pooled gradient", wire_, &wire_values_, &block);
      fetch_->received[r] = bytes.GetString("row-wise piece updates");
      bytes.ExpectEnd();
    }
    if (!exchange_[r].outcome.ok()) continue;  // CheckContributions throws its error
    if (static_cast<int64_t>(block.size()) != in.samples[r] * width)
      Throw(StatusCode::kDataLoss, "model-parallel step: trainer ", r, " sent ", block.size(),
            " pooled gradient values, expected ", in.samples[r], " x ", width);
    std::copy(block.begin(), block.end(), owned_grad_.begin() + in.first[r] * width);
  }
}

void ModelParallelTrainer::ApplyUpdates() {
  const Input& in = *in_;
  const int32_t ranks = comm_->world_size();
  const int64_t global_batch = exchange_[0].samples * ranks;
  // Decoded before anything changes: a bad part throws with the state untouched.
  std::vector<std::vector<ps::FeatureUpdate>> replica_parts;
  if (!replicas_.features().empty())
    for (int32_t r = 0; r < ranks; ++r)
      replica_parts.push_back(ps::DecodeFeatureUpdates(exchange_[r].replica_update));
  const StepRates rates =
      RatesForStep(config_.lr_schedule(), config_.dense_optimizer().learning_rate(),
                   config_.sparse_optimizer().learning_rate(), step_);
  // The dense and replicated updates are the same on every rank; the owned shards' are
  // each rank's own, so every rank says whether its update is finite before any writes.
  const bool dense_ok = DenseUpdateIsFinite(*dense_optimizer_, model_.dense_params(),
                                            exchange_[0].dense_grad.data(), rates, pool_);
  bool owned_ok = false;
  const Outcome checked = Attempt([&] {
    owned_ok =
        shards_->PooledUpdateIsFinite(in.joined_vb, owned_grad_.data(), rates.sparse_lr, rates.t);
    owned_ok = PieceUpdatesAreFinite(global_batch, rates) && owned_ok;
  });
  ByteWriter verdict;
  PutOutcome(checked, &verdict);
  verdict.Put<uint8_t>(owned_ok ? 1 : 0);
  const std::vector<std::string> verdicts = comm_->AllGather(std::move(verdict).Take());
  bool all_ok = dense_ok;
  for (int32_t r = 0; r < ranks; ++r) {
    ByteReader bytes(verdicts[r], "model-parallel update verdict");
    CheckOutcome(GetOutcome(&bytes), r, "checking its shards' update");
    all_ok &= bytes.Get<uint8_t>("finite") == 1;
    bytes.ExpectEnd();
  }
  if (!all_ok) ThrowUpdateNotFinite(rates);
  if (!replica_parts.empty())  // checks every row first; writes nothing when it throws
    replicas_.ApplyUpdate(ps::ConcatenateRanks(replica_parts), global_batch, rates.sparse_lr,
                          rates.t);
  shards_->ApplyPooledUpdate(owned_grad_.data(), rates.sparse_lr, rates.t);
  if (!layout_.range_features(comm_->rank()).empty())
    owned_.ApplyCheckedUpdate(rates.sparse_lr, rates.t);
  UpdateDense(*dense_optimizer_, model_.dense_params(), exchange_[0].dense_grad.data(), rates,
              pool_);
  backend_->ParametersChanged();
  step_ = rates.t;
  ++wire_bytes_.steps;
}

void ModelParallelTrainer::PredictLogits(const BatchView& batch, float* logits) {
  ExchangeInput(Prepare(&batch, Purpose::kPredict), Purpose::kPredict);
  ExchangePooled();
  if (logits == nullptr) ThrowInvalid("logits is NULL");
  backend_->PredictLogitsPooled(in_->mine.validated, pooled_.data(), logits);
}

void ModelParallelTrainer::PredictRounds(int64_t rounds,
                                         const std::function<const BatchView*(int64_t)>& mine,
                                         std::vector<double>* probabilities,
                                         std::vector<float>* labels) {
  std::vector<float> logits;
  for (int64_t i = 0; i < rounds; ++i) {
    const BatchView* b = mine(i);
    try {
      ExchangeInput(Prepare(b, Purpose::kEvaluate), Purpose::kEvaluate);
    } catch (const Error& e) {
      Throw(e.code(), "prediction round ", i, ": ", e.what());
    }
    ExchangePooled();
    if (b == nullptr) continue;
    logits.resize(static_cast<size_t>(b->batch_size));
    backend_->PredictLogitsPooled(in_->mine.validated, pooled_.data(), logits.data());
    for (int64_t j = 0; j < b->batch_size; ++j) {
      probabilities->push_back(StableSigmoid(static_cast<double>(logits[j])));
      labels->push_back(b->labels[j]);
    }
  }
}

std::vector<int64_t> ModelParallelTrainer::GatherBatchCounts(size_t mine) {
  ByteWriter count;
  count.Put<int64_t>(static_cast<int64_t>(mine));
  const std::vector<std::string> all = comm_->AllGather(std::move(count).Take());
  std::vector<int64_t> counts;
  for (size_t r = 0; r < all.size(); ++r) {
    ByteReader in(all[r], "model-parallel evaluation");
    counts.push_back(in.Get<int64_t>("batch count"));
    in.ExpectEnd();
    if (counts.back() < 0 || counts.back() > kMaxBatchCount)
      Throw(StatusCode::kDataLoss, "trainer ", r, " sent a batch count of ", counts.back(),
            ", outside [0, ", kMaxBatchCount, "]");
  }
  return counts;
}

void ModelParallelTrainer::AppendPredictions(const std::vector<BatchView>& batches, size_t first,
                                             size_t stride, std::vector<double>* probabilities,
                                             std::vector<float>* labels) {
  if (stride == 0) ThrowInvalid("prediction stride must be > 0");
  // The same batches on every rank (each predicts its share): the same rounds everywhere.
  const std::vector<int64_t> counts = GatherBatchCounts(batches.size());
  for (size_t r = 1; r < counts.size(); ++r)
    if (counts[r] != counts[0])
      ThrowInvalid("evaluation needs the same batches on every trainer: trainer 0 has ", counts[0],
                   ", trainer ", r, " has ", counts[r]);
  if (batches.empty()) ThrowInvalid("evaluate needs at least one batch");
  const auto rounds = static_cast<int64_t>((batches.size() + stride - 1) / stride);
  PredictRounds(
      rounds,
      [&](int64_t i) {
        const size_t b = first + static_cast<size_t>(i) * stride;
        return b < batches.size() ? &batches[b] : nullptr;
      },
      probabilities, labels);
}

EvalResult ModelParallelTrainer::Evaluate(const std::vector<BatchView>& batches) {
  const std::vector<int64_t> counts = GatherBatchCounts(batches.size());
  const int64_t rounds = *std::max_element(counts.begin(), counts.end());
  if (rounds == 0) ThrowInvalid("evaluate needs at least one batch (no rank has one)");
  std::vector<double> probabilities;
  std::vector<float> labels;
  PredictRounds(
      rounds,
      [&](int64_t i) {
        return static_cast<size_t>(i) < batches.size() ? &batches[static_cast<size_t>(i)] : nullptr;
      },
      &probabilities, &labels);
  return GatherEvaluation(comm_, "", probabilities, labels);
}

void ModelParallelTrainer::set_step(int64_t step) {
  CheckSetStep("model-parallel trainer", queue_.size(), step);
  step_ = step;
}

}  // namespace dlrm::train
