#include "engine/dist/sync_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/config/config.h"
#include "engine/core/finite.h"
#include "engine/core/status.h"
#include "engine/core/tree_reduce.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/optim/lr_schedule.h"

namespace dlrm::dist {
namespace {

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// What every rank says before a step: its part's size, or why it cannot train it.
struct Hello {
  int64_t samples = 0;
  std::string error;  // empty: ready
};

std::string EncodeHello(const Hello& h) {
  std::string out(sizeof(int64_t), '\0');
  std::memcpy(out.data(), &h.samples, sizeof(int64_t));
  return out + h.error;
}

Hello DecodeHello(const std::string& bytes) {
  Hello h;
  if (bytes.size() < sizeof(int64_t)) Throw(StatusCode::kDataLoss, "sync step: short hello");
  std::memcpy(&h.samples, bytes.data(), sizeof(int64_t));
  h.error = bytes.substr(sizeof(int64_t));
  return h;
}

}  // namespace

SyncTrainer::SyncTrainer(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                         Communicator* comm, EmbeddingService* service, ThreadPool* pool)
    : config_(config),
      comm_(comm),
      service_(service),
      pool_(pool),
      model_(config, pool, /*allocate_tables=*/false),
      dense_optimizer_(
          MakeDenseOptimizer<float>(config.dense_optimizer(), model_.dense_params().size())),
      replicas_(config, plan, kTrainerReplica, pool),
      locations_(LocateShards(config.model(), plan)) {
  if (comm_ == nullptr || service_ == nullptr)
    ThrowInvalid("sync trainer: communicator and embedding service are required");
  server_features_.resize(plan.num_servers());
  const config::ModelConfig& model = config.model();
  for (int32_t f = 0; f < model.sparse_features_size(); ++f) {
    const int32_t t = FindTable(model, model.sparse_features(f).table());
    for (const ShardLocation& loc : locations_[t]) {
      if (loc.owner == kTrainerReplica) continue;
      std::vector<int32_t>& features = server_features_[loc.owner];
      if (features.empty() || features.back() != f) features.push_back(f);
    }
  }
  for (const config::TableConfig& tc : model.tables())
    fetched_.emplace_back(tc.name(), 1, tc.dim());
}

void SyncTrainer::FetchRows(const ValidatedBatch& batch) {
  const config::ModelConfig& model = config_.model();
  const BatchView& view = batch.view;
  local_ids_.assign(view.ids, view.ids + view.num_ids);
  std::vector<std::vector<int64_t>> distinct(model.tables_size());
  const std::vector<FeatureBinding>& bindings = model_.feature_bindings();
  for (int32_t f = 0; f < view.num_sparse; ++f) {
    std::vector<int64_t>& ids = distinct[bindings[f].table];
    ids.insert(ids.end(), view.ids + batch.bag_begin(f, 0),
               view.ids + batch.bag_begin(f + 1, 0));
  }
  for (int32_t t = 0; t < model.tables_size(); ++t) {
    std::vector<int64_t>& ids = distinct[t];
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    const int32_t dim = model.tables(t).dim();
    const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(ids.size()));
    fetched_[t] = EmbeddingTable<float>(model.tables(t).name(), rows, dim);
    // Each piece of the table contributes the rows and columns it holds.
    for (const ShardLocation& loc : locations_[t]) {
      const auto lo = std::lower_bound(ids.begin(), ids.end(), loc.row_begin);
      const auto hi = std::lower_bound(ids.begin(), ids.end(), loc.row_end);
      if (lo == hi) continue;
      const std::vector<int64_t> wanted(lo, hi);
      std::vector<float> rows(wanted.size() * (loc.col_end - loc.col_begin));
      if (loc.owner == kTrainerReplica) {
        replicas_.Lookup(loc.index, wanted.data(), static_cast<int64_t>(wanted.size()),
                         rows.data());
      } else {
        service_->Lookup(loc.owner, loc.index, step_ + 1, wanted, &rows);
      }
      const int32_t width = loc.col_end - loc.col_begin;
      const auto first = static_cast<int64_t>(lo - ids.begin());
      for (size_t i = 0; i < wanted.size(); ++i)
        std::copy(rows.begin() + i * width, rows.begin() + (i + 1) * width,
                  fetched_[t].row(first + static_cast<int64_t>(i)) + loc.col_begin);
    }
  }
  // The part re-indexed into the fetched rows.
  for (int32_t f = 0; f < view.num_sparse; ++f) {
    const std::vector<int64_t>& ids = distinct[bindings[f].table];
    for (int64_t i = batch.bag_begin(f, 0); i < batch.bag_begin(f + 1, 0); ++i)
      local_ids_[i] = std::lower_bound(ids.begin(), ids.end(), view.ids[i]) - ids.begin();
  }
}

std::vector<FeatureUpdate> SyncTrainer::UpdatesFor(const std::vector<int32_t>& features,
                                                   const ValidatedBatch& batch) const {
  const BatchView& view = batch.view;
  const int64_t samples = view.batch_size;
  const int32_t width = model_.pooled_width();
  std::vector<FeatureUpdate> updates;
  for (const int32_t f : features) {
    const FeatureBinding& b = model_.feature_bindings()[f];
    const int32_t dim = config_.model().tables(b.table).dim();
    FeatureUpdate u;
    u.feature = f;
    u.lengths.assign(view.lengths + f * samples, view.lengths + (f + 1) * samples);
    const int64_t begin = batch.bag_begin(f, 0), end = batch.bag_begin(f + 1, 0);
    u.ids.assign(view.ids + begin, view.ids + end);
    if (view.weights) u.weights.assign(view.weights + begin, view.weights + end);
    u.d_pooled.resize(static_cast<size_t>(samples) * dim);
    for (int64_t r = 0; r < samples; ++r) {
      const float* src = d_pooled_.data() + r * width + b.offset;
      std::copy(src, src + dim, u.d_pooled.begin() + r * dim);
    }
    updates.push_back(std::move(u));
  }
  return updates;
}

float SyncTrainer::TrainStep(const BatchView& part) {
  // 0. Every rank validates its part, then all learn whether all can go on.
  Hello hello;
  ValidatedBatch batch;
  try {
    batch = ValidateBatch(part, model_.num_dense_features(), model_.feature_specs(), true);
    hello.samples = part.batch_size;
    const int64_t rows = model_.chunk_rows();
    if (part.batch_size % rows != 0 || !IsPowerOfTwo(part.batch_size / rows))
      ThrowInvalid("sync training needs each trainer's part to be a power-of-two number of ",
                   "reduction chunks (reduction_chunk_rows ", rows, " x 1, 2, 4, ...), got ",
                   part.batch_size, " samples");
  } catch (const Error& e) {
    hello.error = e.what();
  }
  const std::vector<std::string> hellos = comm_->AllGather(EncodeHello(hello));
  const int32_t ranks = comm_->world_size();
  std::vector<Hello> all;
  for (const std::string& bytes : hellos) all.push_back(DecodeHello(bytes));
  for (int32_t r = 0; r < ranks; ++r) {
    if (!all[r].error.empty())
      ThrowInvalid("step ", step_ + 1, ": trainer ", r, "'s batch part: ", all[r].error);
  }
  int64_t global_batch = 0;
  for (int32_t r = 0; r < ranks; ++r) {
    if (all[r].samples != all[0].samples)
      ThrowInvalid("step ", step_ + 1, ": trainer ", r, " has ", all[r].samples,
                   " samples, trainer 0 has ", all[0].samples, " (parts must be equal)");
    global_batch += all[r].samples;
  }

  // 1-2. Rows, then this part's forward/backward.
  FetchRows(batch);
  ValidatedBatch local = batch;
  local.view.ids = local_ids_.data();
  const EmbeddingBagCollection<float> bags(&fetched_, model_.feature_bindings(),
                                           model_.pooled_width());
  const double loss_sum =
      model_.ForwardBackwardPart(local, global_batch, bags, &dense_grad_, &d_pooled_, pool_);

  // 3. Subtrees of all ranks -> the global tree, on every rank.
  const size_t num_params = dense_grad_.size();
  std::string mine(sizeof(double) + 1 + num_params * sizeof(float), '\0');
  std::memcpy(mine.data(), &loss_sum, sizeof(double));
  mine[sizeof(double)] = AllFinite(d_pooled_) ? 1 : 0;
  std::memcpy(mine.data() + sizeof(double) + 1, dense_grad_.data(), num_params * sizeof(float));
  const std::vector<std::string> parts = comm_->AllGather(mine);
  std::vector<std::vector<float>> grads(ranks, std::vector<float>(num_params));
  std::vector<double> losses(ranks);
  bool finite = true;
  for (int32_t r = 0; r < ranks; ++r) {
    if (parts[r].size() != mine.size())
      Throw(StatusCode::kDataLoss, "sync step: trainer ", r, " sent ", parts[r].size(),
            " gradient bytes, expected ", mine.size());
    std::memcpy(&losses[r], parts[r].data(), sizeof(double));
    finite &= parts[r][sizeof(double)] == 1;
    std::memcpy(grads[r].data(), parts[r].data() + sizeof(double) + 1,
                num_params * sizeof(float));
  }
  std::vector<float*> grad_ptrs;
  std::vector<double*> loss_ptrs;
  for (int32_t r = 0; r < ranks; ++r) {
    grad_ptrs.push_back(grads[r].data());
    loss_ptrs.push_back(&losses[r]);
  }
  TreeReduceInto(grad_ptrs, num_params, pool_);
  TreeReduceInto(loss_ptrs, 1, nullptr);
  const double loss = losses[0] / static_cast<double>(global_batch);
  if (!finite || !std::isfinite(loss) || !AllFinite(grads[0])) ThrowDiverged(step_, loss);

  const double factor = LrFactor(config_.lr_schedule(), step_);
  const auto dense_lr =
      static_cast<float>(config_.dense_optimizer().learning_rate() * factor);
  const auto sparse_lr =
      static_cast<float>(config_.sparse_optimizer().learning_rate() * factor);
  const int64_t t = step_ + 1;
  dense_optimizer_->Update(model_.dense_params().data(), grads[0].data(), 0, num_params,
                           dense_lr, t);

  // 4. Embedding updates: servers, then the replicas from every rank's part.
  for (int32_t owner = 0; owner < static_cast<int32_t>(server_features_.size()); ++owner) {
    if (server_features_[owner].empty()) continue;
    service_->Update(owner, comm_->rank(), t, sparse_lr,
                     UpdatesFor(server_features_[owner], batch));
  }
  if (!replicas_.features().empty()) {
    const std::vector<std::string> all =
        comm_->AllGather(EncodeFeatureUpdates(UpdatesFor(replicas_.features(), batch)));
    std::vector<std::vector<FeatureUpdate>> by_rank;
    for (const std::string& bytes : all) by_rank.push_back(DecodeFeatureUpdates(bytes));
    replicas_.ApplyUpdate(ConcatenateRanks(by_rank), global_batch, sparse_lr, t);
  }
  step_ = t;
  return static_cast<float>(loss);
}

}  // namespace dlrm::dist
