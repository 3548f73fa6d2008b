// Embedding rows kept on disk (issue 14's SSD tier): per table, a log of fixed-size
// records in segment files, as Bitcask and WiscKey keep values, and in memory an array
// saying where each row's latest record is (4 bytes a row). A write appends; a read is one
// pread. The DRAM cache above it (engine/model/ssd_tier.h) writes back the rows it evicts
// and reads the rows a step misses; the math never sees the tier.
//
// Files, in the store's directory (little-endian):
//   <table>.<segment>.seg  a header ("DLRMROWS", version, table, width, CRC32C of those),
//                          then records: the id (i64), the row's `width` floats, a CRC32C
//                          of both. Appended to while it is its table's open segment, then
//                          never changed (sealed), so a copy may hard-link it.
//   <table>.index          written by CopyTo: the table's segments and their record
//                          counts, each row's record (segment * records_per_segment +
//                          record, a uint32; none: UINT32_MAX), a CRC32C of all of it.
// Garbage: a row written again leaves its old record dead. When a table's segments exceed
// twice what its live records need, plus two, the sealed segment with the fewest live
// records is collected before the next write (its live records appended anew, its file
// removed): the disk holds about twice the live rows at most, and a collection moves
// fewer than half a segment's records per segment it frees.
// Durability: a working store is scratch (the engine restores its last checkpoint, never
// the store of a process that died). What lasts is what CopyTo copied: segments fsync'ed
// and hard-linked, index files written whole (temporary, fsync, rename). A directory
// opened again must be empty, missing, or such a copy.
//
// Descriptors: each table's open segment has its own; the sealed segments a read needs
// are opened read-only through an OpenFileCache (the process's, shared by every store, or
// one of max_open_files for this store), so stores of any number of segments stay under
// the process's RLIMIT_NOFILE.
// Ownership: owns its directory's files and its descriptors.
// Threading: every call may run concurrently with any other; a table's calls take its
// lock (Reads shared), so a Read concurrent with a Write of the same rows sees each row
// before or after it.
// Errors: kInvalidArgument naming the argument (a null pointer, a negative count, a table
// not declared, an id outside [0, rows), bad options); kIo naming the file and the OS's
// message when the disk fails; kDataLoss naming the file (and the table and id) for a
// record or index that fails its checksum, is cut short or disagrees with the declared
// tables, or a file in the directory that is not the store's. A failed Write writes
// nothing; a failed Read leaves values as they were; a failed CopyTo leaves no directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlrm {

class OpenFileCache;

struct RowStoreTable {
  int32_t table = 0;  // the model's table index
  int64_t rows = 0;   // its ids are [0, rows)
  int64_t width = 0;  // floats per row
  // A new segment's capacity, in [1, 2^31]: as many whole records as fit, at least one.
  // Larger segments mean fewer files (and descriptors), longer collections. A table
  // loaded from a copy keeps the copy's.
  int64_t segment_bytes = int64_t{32} << 20;
};

struct RowStoreOptions {
  std::string path;  // the store's directory, created when missing
  std::vector<RowStoreTable> tables;
  // Sealed segments this store holds open at once, >= 0; 0: none of its own, the
  // process-wide OpenFileCache (a quarter of RLIMIT_NOFILE for all stores together).
  // Fewer than the segments read often costs an open() a read.
  int64_t max_open_files = 0;
};

struct RowStoreStats {
  int64_t live_rows = 0;   // rows stored
  int64_t segments = 0;    // segment files in use
  int64_t disk_bytes = 0;  // their bytes
  int64_t moved_rows = 0;  // records garbage collection appended again, in all
};

class RowStore {
 public:
  static constexpr int64_t kMaxWidth = int64_t{1} << 20;
  // The memory a table of `rows` rows holds (its record locations).
  static int64_t IndexBytes(int64_t rows) { return rows * 4; }

  explicit RowStore(const RowStoreOptions& options);
  ~RowStore();
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;

  // Stores rows ids[i] -> values[i * width, (i + 1) * width) of `table`, replacing any
  // stored before (of an id given twice, the last); all of them or none.
  void Write(int32_t table, const int64_t* ids, int64_t n, const float* values);
  // For each ids[i]: found[i] says whether it is stored, and if so its row is copied to
  // values[i * width, ...); the rows of ids not found are left as they were. Returns how
  // many were found.
  int64_t Read(int32_t table, const int64_t* ids, int64_t n, float* values, bool* found) const;
  // A copy of everything written so far into `dir`, which must not exist; it opens as a
  // RowStore of its own (of the same tables). Each table's copy is consistent; with
  // writes to other tables running meanwhile, each is its table's state when its turn
  // came (the engine copies between steps, when nothing writes).
  void CopyTo(const std::string& dir);
  RowStoreStats stats(int32_t table) const;

  const std::string& path() const { return path_; }

 private:
  class TableLog;
  TableLog& Log(int32_t table) const;  // kInvalidArgument for a table not declared
  // The declared tables' logs, loaded from their index files when the directory has them.
  void OpenTables(const RowStoreOptions& options);

  std::string path_;
  std::unique_ptr<OpenFileCache> own_files_;     // with max_open_files > 0
  OpenFileCache* files_ = nullptr;               // own_files_, or the process's
  std::vector<std::unique_ptr<TableLog>> logs_;  // by table index; null: not declared
};

}  // namespace dlrm
