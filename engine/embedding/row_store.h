// Embedding rows kept on disk (issue 14's SSD tier): an embedded RocksDB database, as
// TorchRec's SSD tables use, holding for each (table, id) one row of `width` float32
// values (the row's weights followed by its optimizer state). The DRAM cache above it
// (not built yet) writes back the rows it evicts and reads the rows a step misses; the
// math never sees the tier.
//
// Keys are the table index and the id, big-endian with the id's sign bit flipped, so a
// table's rows sort by id and iterate in id order. Values are the floats' bytes; RocksDB
// checksums its blocks and its write-ahead log. A Write is one atomic write batch, in the
// write-ahead log before it returns, so a process killed with SIGKILL afterwards loses
// nothing of it (with sync_writes, a machine that loses power neither; without
// write_ahead_log, only what CopyTo flushed survives). CopyTo makes a
// consistent copy of everything written (a RocksDB checkpoint: hard links where it can),
// what a checkpoint of a table larger than memory is built on.
//
// Ownership: owns the database; one RowStore per directory (RocksDB locks it).
// Threading: every call may run concurrently with any other (RocksDB's guarantee); a
// Read concurrent with a Write of the same rows sees each row before or after it.
// Errors: kInvalidArgument naming the argument (a null pointer, a width outside
// [1, kMaxWidth], a negative count, a negative table); kIo naming the directory and
// RocksDB's message when the disk fails or the directory cannot be opened; kDataLoss
// naming the table and id for a stored row of another width or a corrupt database. A
// failed Write writes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dlrm {

struct RowStoreOptions {
  std::string path;  // the database's directory, created when missing
  // RocksDB's block cache: rows read recently, beside the OS page cache.
  int64_t block_cache_bytes = int64_t{64} << 20;
  bool sync_writes = false;  // fsync the write-ahead log at each Write
  // false: Writes skip the write-ahead log, so what was written since the last flush
  // (CopyTo flushes) is lost if the process dies: for a store that is scratch between
  // checkpoints (the engine's working store), where that costs nothing.
  bool write_ahead_log = true;
};

class RowStore {
 public:
  static constexpr int64_t kMaxWidth = int64_t{1} << 20;

  explicit RowStore(const RowStoreOptions& options);
  ~RowStore();
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;

  // Stores rows ids[i] -> values[i * width, (i + 1) * width) of `table`, replacing any
  // stored before; all of them or none.
  void Write(int32_t table, const int64_t* ids, int64_t n, const float* values, int64_t width);
  // For each ids[i]: found[i] says whether it is stored, and if so its row is copied to
  // values[i * width, ...); the rows of ids not found are left as they were. Returns how
  // many were found.
  int64_t Read(int32_t table, const int64_t* ids, int64_t n, int64_t width, float* values,
               bool* found) const;
  // Removes the rows (ids not stored are no error); all of them or none.
  void Erase(int32_t table, const int64_t* ids, int64_t n);
  // A consistent copy of everything written so far into `dir`, which must not exist; it
  // opens as a RowStore of its own.
  void CopyTo(const std::string& dir) const;
  // fn(id, row) for each stored row of `table`, in id order (width checked as in Read).
  template <typename Fn>
  void ForEach(int32_t table, int64_t width, Fn fn) const;

  const std::string& path() const { return path_; }

 private:
  struct Db;
  // Calls visit(id, values) for each row of `table`, in id order.
  void Scan(int32_t table, int64_t width, void (*visit)(void*, int64_t, const float*),
            void* context) const;

  std::string path_;
  std::unique_ptr<Db> db_;
};

template <typename Fn>
void RowStore::ForEach(int32_t table, int64_t width, Fn fn) const {
  Scan(
      table, width,
      [](void* context, int64_t id, const float* row) { (*static_cast<Fn*>(context))(id, row); },
      &fn);
}

}  // namespace dlrm
