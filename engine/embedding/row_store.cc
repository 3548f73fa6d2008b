#include "engine/embedding/row_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/perf_level.h>
#include <rocksdb/slice.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {
namespace {

constexpr size_t kKeyBytes = 12;  // table (4 bytes) + id (8 bytes), big-endian
using Key = std::array<char, kKeyBytes>;

Key MakeKey(int32_t table, int64_t id) {
  Key key;
  const auto t = static_cast<uint32_t>(table);
  // Flipping the sign bit makes the unsigned big-endian order the signed order of ids.
  const uint64_t i = static_cast<uint64_t>(id) ^ (uint64_t{1} << 63);
  for (int b = 0; b < 4; ++b) key[b] = static_cast<char>(t >> (24 - 8 * b));
  for (int b = 0; b < 8; ++b) key[4 + b] = static_cast<char>(i >> (56 - 8 * b));
  return key;
}

int64_t IdOfKey(const rocksdb::Slice& key) {
  uint64_t i = 0;
  for (int b = 0; b < 8; ++b) i = (i << 8) | static_cast<uint8_t>(key[4 + b]);
  return static_cast<int64_t>(i ^ (uint64_t{1} << 63));
}

// kIo naming the directory, or kDataLoss for a corrupt database.
[[noreturn]] void ThrowStatus(const std::string& path, const char* what,
                              const rocksdb::Status& status) {
  Throw(status.IsCorruption() ? StatusCode::kDataLoss : StatusCode::kIo, "row store ", path, ": ",
        what, ": ", status.ToString());
}

void CheckArguments(int32_t table, const int64_t* ids, int64_t n, int64_t width,
                    const void* values) {
  if (table < 0) ThrowInvalid("row store: table must be >= 0, got ", table);
  if (n < 0) ThrowInvalid("row store: the number of ids must be >= 0, got ", n);
  if (width < 1 || width > RowStore::kMaxWidth)
    ThrowInvalid("row store: width must be in [1, ", RowStore::kMaxWidth, "], got ", width);
  if (n > 0 && (ids == nullptr || values == nullptr))
    ThrowInvalid("row store: ", ids == nullptr ? "ids" : "values", " is NULL");
}

// RocksDB counts every operation in thread-local counters unless the calling thread
// turns them off (about 6% of an SSD-tier step); nothing here reads them.
void NoPerfCounters() {
  thread_local const bool off = (rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable), true);
  (void)off;
}

}  // namespace

struct RowStore::Db {
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::WriteOptions write;
};

RowStore::RowStore(const RowStoreOptions& options) : path_(options.path), db_(new Db) {
  if (path_.empty()) ThrowInvalid("row store: path is empty");
  if (options.block_cache_bytes < 0)
    ThrowInvalid("row store: block_cache_bytes must be >= 0, got ", options.block_cache_bytes);
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(static_cast<size_t>(options.block_cache_bytes));
  // Point reads of rows: a Bloom filter per table file lets a read skip the files that
  // do not hold its key, and a hash index inside each block finds the key without a
  // binary search.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // Most reads look for rows already flushed to table files: a Bloom filter over the
  // memtable's keys spares them its skip-list search.
  o.memtable_whole_key_filtering = true;
  o.memtable_prefix_bloom_size_ratio = 0.05;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status status = rocksdb::DB::Open(o, path_, &db);
  if (!status.ok()) ThrowStatus(path_, "cannot open", status);
  db_->db.reset(db);
  db_->write.sync = options.sync_writes;
  db_->write.disableWAL = !options.write_ahead_log;
}

RowStore::~RowStore() = default;

void RowStore::Write(int32_t table, const int64_t* ids, int64_t n, const float* values,
                     int64_t width) {
  CheckArguments(table, ids, n, width, values);
  NoPerfCounters();
  rocksdb::WriteBatch batch;
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    const Key key = MakeKey(table, ids[i]);
    batch.Put(rocksdb::Slice(key.data(), key.size()),
              rocksdb::Slice(reinterpret_cast<const char*>(values + i * width), row_bytes));
  }
  const rocksdb::Status status = db_->db->Write(db_->write, &batch);
  if (!status.ok()) ThrowStatus(path_, "write failed", status);
}

int64_t RowStore::Read(int32_t table, const int64_t* ids, int64_t n, int64_t width, float* values,
                       bool* found) const {
  CheckArguments(table, ids, n, width, values);
  if (n > 0 && found == nullptr) ThrowInvalid("row store: found is NULL");
  NoPerfCounters();
  std::vector<Key> keys(static_cast<size_t>(n));
  std::vector<rocksdb::Slice> slices(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    keys[i] = MakeKey(table, ids[i]);
    slices[i] = rocksdb::Slice(keys[i].data(), keys[i].size());
  }
  std::vector<rocksdb::PinnableSlice> rows(static_cast<size_t>(n));
  std::vector<rocksdb::Status> statuses(static_cast<size_t>(n));
  rocksdb::DB& db = *db_->db;
  db.MultiGet(rocksdb::ReadOptions(), db.DefaultColumnFamily(), static_cast<size_t>(n),
              slices.data(), rows.data(), statuses.data());
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    found[i] = false;
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) ThrowStatus(path_, "read failed", statuses[i]);
    if (rows[i].size() != row_bytes)
      Throw(StatusCode::kDataLoss, "row store ", path_, ": table ", table, " id ", ids[i],
            " has a row of ", rows[i].size(), " bytes, not ", row_bytes, " (width ", width, ")");
  }
  // Copied only once every row checked out: a failed Read leaves values as they were.
  for (int64_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) continue;
    std::memcpy(values + i * width, rows[i].data(), row_bytes);
    found[i] = true;
    ++hits;
  }
  return hits;
}

void RowStore::Erase(int32_t table, const int64_t* ids, int64_t n) {
  CheckArguments(table, ids, n, 1, ids);
  rocksdb::WriteBatch batch;
  for (int64_t i = 0; i < n; ++i) {
    const Key key = MakeKey(table, ids[i]);
    batch.Delete(rocksdb::Slice(key.data(), key.size()));
  }
  const rocksdb::Status status = db_->db->Write(db_->write, &batch);
  if (!status.ok()) ThrowStatus(path_, "erase failed", status);
}

void RowStore::CopyTo(const std::string& dir) const {
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status status = rocksdb::Checkpoint::Create(db_->db.get(), &raw);
  const std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  if (status.ok()) status = checkpoint->CreateCheckpoint(dir);
  if (!status.ok()) ThrowStatus(path_, ("cannot copy to " + dir).c_str(), status);
}

void RowStore::Scan(int32_t table, int64_t width, void (*visit)(void*, int64_t, const float*),
                    void* context) const {
  CheckArguments(table, nullptr, 0, width, nullptr);
  const Key first = MakeKey(table, INT64_MIN);
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(rocksdb::ReadOptions()));
  std::vector<float> row(static_cast<size_t>(width));
  for (it->Seek(rocksdb::Slice(first.data(), first.size()));
       it->Valid() && it->key().starts_with(rocksdb::Slice(first.data(), 4)); it->Next()) {
    const int64_t id = IdOfKey(it->key());
    if (it->value().size() != row_bytes)
      Throw(StatusCode::kDataLoss, "row store ", path_, ": table ", table, " id ", id,
            " has a row of ", it->value().size(), " bytes, not ", row_bytes, " (width ", width,
            ")");
    std::memcpy(row.data(), it->value().data(), row_bytes);
    visit(context, id, row.data());
  }
  if (!it->status().ok()) ThrowStatus(path_, "scan failed", it->status());
}

}  // namespace dlrm
