#include "engine/embedding/row_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string_view>
#include <utility>

#include "engine/core/byte_codec.h"
#include "engine/core/crc32c.h"
#include "engine/core/file_descriptor.h"
#include "engine/core/open_file_cache.h"
#include "engine/core/scratch_dir.h"
#include "engine/core/shared_mutex.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSegmentMagic = 0x53574F524D524C44u;  // "DLRMROWS", little-endian
constexpr uint64_t kIndexMagic = 0x5844495244524C44u;    // "DLRMRIDX"
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeaderBytes = 24;  // magic, version, table, width, CRC32C
constexpr int64_t kIdBytes = 8, kCrcBytes = 4;
constexpr uint32_t kNowhere = UINT32_MAX;
constexpr const char* kIndexSuffix = ".index";

[[noreturn]] void ThrowErrno(const std::string& file, const char* what) {
  Throw(StatusCode::kIo, "row store file ", file, ": ", what, ": ", std::strerror(errno));
}

void WriteAll(int fd, const void* data, int64_t bytes, int64_t offset, const std::string& file) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ThrowErrno(file, "write failed");
    p += n, bytes -= n, offset += n;
  }
}

// kDataLoss when the file ends first.
void ReadAll(int fd, void* data, int64_t bytes, int64_t offset, const std::string& file) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ThrowErrno(file, "read failed");
    if (n == 0)
      Throw(StatusCode::kDataLoss, "row store file ", file, " ends at byte ", offset, ", ", bytes,
            " bytes short of a record");
    p += n, bytes -= n, offset += n;
  }
}

// A whole file mapped read-only (an empty file maps nothing); kIo naming it when it cannot.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (!fd.is_open() || ::fstat(fd.get(), &st) != 0) ThrowErrno(path, "cannot open");
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) return;
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (data_ == MAP_FAILED) {
      data_ = nullptr;
      ThrowErrno(path, "cannot map");
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const {
    return data_ != nullptr ? std::string_view(static_cast<const char*>(data_), size_)
                            : std::string_view();
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A segment's header: what it holds, checksummed.
std::string SegmentHeader(int32_t table, int64_t width) {
  ByteWriter w;
  w.Put<uint64_t>(kSegmentMagic);
  w.Put<uint32_t>(kVersion);
  w.Put<int32_t>(table);
  w.Put<uint32_t>(static_cast<uint32_t>(width));
  w.Put<uint32_t>(Crc32c(0, w.bytes().data(), w.bytes().size()));
  DLRM_INTERNAL_CHECK(static_cast<int64_t>(w.bytes().size()) == kHeaderBytes);
  return std::move(w).Take();
}

// The number of the digits at s[*pos...] (false: none, more than 12, or a leading zero:
// the store writes each number one way).
bool ParseNumber(const std::string& s, size_t* pos, int64_t* out) {
  const size_t begin = *pos;
  int64_t value = 0;
  for (; *pos < s.size() && s[*pos] >= '0' && s[*pos] <= '9'; ++*pos) {
    if (*pos - begin == 12) return false;
    value = value * 10 + (s[*pos] - '0');
  }
  *out = value;
  return *pos > begin && (*pos - begin == 1 || s[begin] != '0');
}

// The table of a store file's name: "<table>.<segment>.seg" (segment set) or
// "<table>.index" (segment -1); false for any other name.
bool ParseFileName(const std::string& name, int32_t* table, int64_t* segment) {
  size_t pos = 0;
  int64_t number = 0;
  if (!ParseNumber(name, &pos, &number) || number > INT32_MAX) return false;
  *table = static_cast<int32_t>(number);
  const std::string rest = name.substr(pos);
  if (rest == kIndexSuffix) return *segment = -1, true;
  pos = 1;
  if (rest.empty() || rest[0] != '.' || !ParseNumber(rest, &pos, &number)) return false;
  *segment = number;
  return rest.substr(pos) == kImmutableFileExtension;
}

}  // namespace

// One table's log. Locked by its own mutex: Write and CopyTo exclusively, Read shared.
class RowStore::TableLog {
 public:
  // `files`: the store's open segments (borrowed), shared by its tables.
  TableLog(const std::string& dir, const RowStoreTable& shape, OpenFileCache* files);

  void Write(const int64_t* ids, int64_t n, const float* values);
  int64_t Read(const int64_t* ids, int64_t n, float* values, bool* found) const;
  void CopyTo(const std::string& dir);
  void Load(const std::string& index_path);
  RowStoreStats stats() const;

 private:
  struct Segment {
    bool in_use = false;  // a file of this table; false: the number is free
    int64_t records = 0;  // appended
    int64_t live = 0;     // rows whose latest record is here
    bool synced = false;  // its records are on disk (fdatasync)
  };

  std::string SegmentPath(const std::string& dir, int64_t segment) const;
  std::string IndexPath(const std::string& dir) const;
  // The descriptor to read (or sync) segment s, at `path` (SegmentPath's), by: the open
  // segment's own, else the cache's (opened read-only on a miss).
  OpenFileCache::Handle SegmentFile(int64_t s, const std::string& path) const;
  // Seals the open segment (if any): its own descriptor is closed, reads go to the cache.
  void SealActive();
  void CheckIds(const int64_t* ids, int64_t n) const;
  // Records (id, row, CRC32C) of ids[i] -> values[i * width_, ...).
  std::vector<char> Format(const int64_t* ids, int64_t n, const float* values) const;
  // Appends m formatted records, then points their rows at them.
  void Append(const char* records, int64_t m);
  void OpenSegment();
  void Point(int64_t id, uint32_t location);
  // Reads the record at `location`, checks its CRC32C and that it is id's, into out.
  void ReadRecord(uint32_t location, int64_t id, char* out) const;
  void CheckRecord(const char* record, int64_t id, const std::string& file) const;
  bool OverGarbageLimit() const;
  void Collect(int64_t victim);
  void WriteIndex(const std::string& path) const;
  void ParseIndex(const std::string& path, std::string_view bytes,
                  std::vector<std::pair<uint32_t, int64_t>>* segments);
  void OpenSealedSegment(uint32_t id, int64_t records);
  void CountLive(const std::string& path);

  mutable WriterPreferringMutex mu_;
  const std::string dir_;
  OpenFileCache* const files_;
  const int32_t table_;
  const int64_t rows_, width_, record_bytes_;
  int64_t per_segment_;            // records a segment holds (an index file's may differ)
  std::vector<uint32_t> where_;    // per row: its latest record, or kNowhere
  std::vector<Segment> segments_;  // by number; not in_use: free
  std::set<int64_t> free_;         // numbers below segments_.size() not in use
  int64_t active_ = -1;            // the open segment, or -1
  // The open segment's descriptor (read-write; the cache's are read-only), shared so that
  // reads take it as they take the cache's.
  OpenFileCache::Handle active_fd_;
  int64_t in_use_ = 0, live_ = 0, moved_ = 0;
};

RowStore::TableLog::TableLog(const std::string& dir, const RowStoreTable& shape,
                             OpenFileCache* files)
    : dir_(dir),
      files_(files),
      table_(shape.table),
      rows_(shape.rows),
      width_(shape.width),
      record_bytes_(kIdBytes + shape.width * static_cast<int64_t>(sizeof(float)) + kCrcBytes),
      per_segment_(std::max<int64_t>(1, (shape.segment_bytes - kHeaderBytes) / record_bytes_)),
      where_(static_cast<size_t>(shape.rows), kNowhere) {}

std::string RowStore::TableLog::SegmentPath(const std::string& dir, int64_t segment) const {
  return dir + "/" + std::to_string(table_) + "." + std::to_string(segment) +
         kImmutableFileExtension;
}

std::string RowStore::TableLog::IndexPath(const std::string& dir) const {
  return dir + "/" + std::to_string(table_) + kIndexSuffix;
}

OpenFileCache::Handle RowStore::TableLog::SegmentFile(int64_t s, const std::string& path) const {
  if (s == active_) return active_fd_;
  return files_->Get(path, O_RDONLY);  // sealed: never written again
}

void RowStore::TableLog::SealActive() {
  active_ = -1;
  active_fd_.reset();
}

void RowStore::TableLog::CheckIds(const int64_t* ids, int64_t n) const {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= rows_)
      ThrowInvalid("row store: ids[", i, "] of table ", table_, " is ", ids[i], ", outside [0, ",
                   rows_, ")");
}

std::vector<char> RowStore::TableLog::Format(const int64_t* ids, int64_t n,
                                             const float* values) const {
  std::vector<char> records(static_cast<size_t>(n * record_bytes_));
  const auto row_bytes = static_cast<size_t>(width_) * sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    char* r = records.data() + i * record_bytes_;
    std::memcpy(r, &ids[i], kIdBytes);
    std::memcpy(r + kIdBytes, values + i * width_, row_bytes);
    const uint32_t crc = Crc32c(0, r, kIdBytes + row_bytes);
    std::memcpy(r + kIdBytes + row_bytes, &crc, kCrcBytes);
  }
  return records;
}

void RowStore::TableLog::Write(const int64_t* ids, int64_t n, const float* values) {
  CheckIds(ids, n);
  const std::vector<char> records = Format(ids, n, values);
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  // Before the write, so that a failed collection fails the Write and writes nothing.
  while (OverGarbageLimit()) {
    int64_t victim = -1;
    for (int64_t s = 0; s < static_cast<int64_t>(segments_.size()); ++s)
      if (s != active_ && segments_[s].in_use &&
          (victim < 0 || segments_[s].live < segments_[victim].live))
        victim = s;
    if (victim < 0) break;
    Collect(victim);
  }
  Append(records.data(), n);
}

bool RowStore::TableLog::OverGarbageLimit() const {
  const int64_t needed = (live_ + per_segment_ - 1) / per_segment_;
  return in_use_ > 2 * needed + 2;
}

void RowStore::TableLog::Append(const char* records, int64_t m) {
  std::vector<uint32_t> locations(static_cast<size_t>(m));
  for (int64_t done = 0; done < m;) {
    if (active_ < 0 || segments_[active_].records == per_segment_) OpenSegment();
    Segment& s = segments_[active_];
    const int64_t c = std::min(m - done, per_segment_ - s.records);
    WriteAll(active_fd_->get(), records + done * record_bytes_, c * record_bytes_,
             kHeaderBytes + s.records * record_bytes_, SegmentPath(dir_, active_));
    for (int64_t j = 0; j < c; ++j)
      locations[done + j] = static_cast<uint32_t>(active_ * per_segment_ + s.records + j);
    s.records += c;  // written: dead records if a later chunk fails
    s.synced = false;
    done += c;
  }
  std::vector<int64_t> ids(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) {
    std::memcpy(&ids[j], records + j * record_bytes_, kIdBytes);
    __builtin_prefetch(&where_[static_cast<size_t>(ids[j])]);  // as Read's
  }
  for (int64_t j = 0; j < m; ++j) Point(ids[j], locations[j]);
}

void RowStore::TableLog::Point(int64_t id, uint32_t location) {
  uint32_t& at = where_[static_cast<size_t>(id)];
  if (at == kNowhere)
    ++live_;
  else
    --segments_[at / per_segment_].live;
  at = location;
  ++segments_[location / per_segment_].live;
}

void RowStore::TableLog::OpenSegment() {
  const int64_t id = free_.empty() ? static_cast<int64_t>(segments_.size()) : *free_.begin();
  if ((id + 1) * per_segment_ > kNowhere)
    Throw(StatusCode::kResourceExhausted, "row store ", dir_, ": table ", table_,
          " has no segment number left (", id, " segments of ", per_segment_, " records)");
  const std::string path = SegmentPath(dir_, id);
  ::unlink(path.c_str());  // a file of no segment in use (left by a failed write)
  FileDescriptor fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) ThrowErrno(path, "cannot create");
  const std::string header = SegmentHeader(table_, width_);
  WriteAll(fd.get(), header.data(), kHeaderBytes, 0, path);
  if (id == static_cast<int64_t>(segments_.size())) segments_.emplace_back();
  free_.erase(id);
  segments_[id] = Segment{true, 0, 0, false};
  active_ = id;
  active_fd_ = std::make_shared<const FileDescriptor>(std::move(fd));
  ++in_use_;
}

void RowStore::TableLog::CheckRecord(const char* record, int64_t id,
                                     const std::string& file) const {
  const int64_t payload = record_bytes_ - kCrcBytes;
  uint32_t crc;
  std::memcpy(&crc, record + payload, kCrcBytes);
  int64_t stored_id;
  std::memcpy(&stored_id, record, kIdBytes);
  if (crc != Crc32c(0, record, static_cast<size_t>(payload)) || stored_id != id)
    Throw(StatusCode::kDataLoss, "row store file ", file, ": the record of table ", table_, " id ",
          id,
          crc != Crc32c(0, record, static_cast<size_t>(payload))
              ? " fails its checksum"
              : " holds id " + std::to_string(stored_id));
}

void RowStore::TableLog::ReadRecord(uint32_t location, int64_t id, char* out) const {
  const int64_t segment = location / per_segment_, record = location % per_segment_;
  const std::string path = SegmentPath(dir_, segment);
  ReadAll(SegmentFile(segment, path)->get(), out, record_bytes_,
          kHeaderBytes + record * record_bytes_, path);
  CheckRecord(out, id, path);
}

int64_t RowStore::TableLog::Read(const int64_t* ids, int64_t n, float* values, bool* found) const {
  CheckIds(ids, n);
  std::vector<char> records(static_cast<size_t>(n * record_bytes_));
  int64_t hits = 0;
  {
    std::shared_lock<WriterPreferringMutex> lock(mu_);
    // The locations sit at random places of an array of 4 bytes a row (a cache and TLB
    // miss each): asked for all at once, the misses overlap (a step's ~200 per table).
    for (int64_t i = 0; i < n; ++i) __builtin_prefetch(&where_[static_cast<size_t>(ids[i])]);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t location = where_[static_cast<size_t>(ids[i])];
      found[i] = location != kNowhere;
      if (found[i]) ReadRecord(location, ids[i], records.data() + hits++ * record_bytes_);
    }
  }
  // Copied only once every record checked out: a failed Read leaves values as they were.
  const char* record = records.data();
  for (int64_t i = 0; i < n; ++i) {
    if (!found[i]) continue;
    std::memcpy(values + i * width_, record + kIdBytes,
                static_cast<size_t>(width_) * sizeof(float));
    record += record_bytes_;
  }
  return hits;
}

void RowStore::TableLog::Collect(int64_t victim) {
  Segment& s = segments_[victim];
  const std::string path = SegmentPath(dir_, victim);
  std::vector<char> records(static_cast<size_t>(s.records * record_bytes_));
  ReadAll(SegmentFile(victim, path)->get(), records.data(), static_cast<int64_t>(records.size()),
          kHeaderBytes, path);
  int64_t kept = 0;
  for (int64_t k = 0; k < s.records; ++k) {
    const char* record = records.data() + k * record_bytes_;
    int64_t id;
    std::memcpy(&id, record, kIdBytes);
    const auto location = static_cast<uint32_t>(victim * per_segment_ + k);
    if (id < 0 || id >= rows_ || where_[static_cast<size_t>(id)] != location) continue;
    CheckRecord(record, id, path);
    std::memmove(records.data() + kept++ * record_bytes_, record,
                 static_cast<size_t>(record_bytes_));
  }
  Append(records.data(), kept);
  DLRM_INTERNAL_CHECK(segments_[victim].live == 0);
  segments_[victim] = Segment{};
  files_->Erase(path);
  ::unlink(path.c_str());  // best effort: a file left behind is only disk
  free_.insert(victim);
  --in_use_;
  moved_ += kept;
}

RowStoreStats RowStore::TableLog::stats() const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  RowStoreStats stats;
  stats.live_rows = live_;
  stats.segments = in_use_;
  for (const Segment& s : segments_)
    if (s.in_use) stats.disk_bytes += kHeaderBytes + s.records * record_bytes_;
  stats.moved_rows = moved_;
  return stats;
}

// ---- copies and loading --------------------------------------------------------------

void RowStore::TableLog::CopyTo(const std::string& dir) {
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  if (active_ >= 0 && segments_[active_].records > 0) SealActive();  // a copy links it
  for (int64_t id = 0; id < static_cast<int64_t>(segments_.size()); ++id) {
    Segment& s = segments_[id];
    if (!s.in_use || id == active_ || s.live == 0) continue;
    const std::string from = SegmentPath(dir_, id), to = SegmentPath(dir, id);
    if (!s.synced && ::fdatasync(SegmentFile(id, from)->get()) != 0)
      ThrowErrno(from, "cannot sync");
    s.synced = true;
    std::error_code ec;
    fs::create_hard_link(from, to, ec);
    if (ec) fs::copy_file(from, to, ec);  // another filesystem
    if (ec)
      Throw(StatusCode::kIo, "row store file ", from, ": cannot copy to ", to, ": ", ec.message());
  }
  WriteIndex(IndexPath(dir));
}

void RowStore::TableLog::WriteIndex(const std::string& path) const {
  ByteWriter w;
  w.Put<uint64_t>(kIndexMagic);
  w.Put<uint32_t>(kVersion);
  w.Put<int32_t>(table_);
  w.Put<int64_t>(width_);
  w.Put<int64_t>(per_segment_);
  std::vector<uint32_t> ids;
  std::vector<int64_t> records;
  for (int64_t id = 0; id < static_cast<int64_t>(segments_.size()); ++id)
    if (segments_[id].in_use && id != active_ && segments_[id].live > 0)
      ids.push_back(static_cast<uint32_t>(id)), records.push_back(segments_[id].records);
  w.PutArray(ids);
  w.PutArray(records);
  w.Put<uint64_t>(where_.size());  // where_ follows, as PutArray would write it
  const auto where_bytes = static_cast<int64_t>(where_.size() * sizeof(uint32_t));
  uint32_t crc = Crc32c(0, w.bytes().data(), w.bytes().size());
  crc = Crc32c(crc, where_.data(), static_cast<size_t>(where_bytes));
  const std::string temp = path + ".tmp";
  FileDescriptor fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) ThrowErrno(temp, "cannot create");
  const auto header_bytes = static_cast<int64_t>(w.bytes().size());
  WriteAll(fd.get(), w.bytes().data(), header_bytes, 0, temp);
  WriteAll(fd.get(), where_.data(), where_bytes, header_bytes, temp);
  WriteAll(fd.get(), &crc, kCrcBytes, header_bytes + where_bytes, temp);
  if (::fsync(fd.get()) != 0) ThrowErrno(temp, "cannot sync");
  if (::rename(temp.c_str(), path.c_str()) != 0) ThrowErrno(path, "cannot rename into place");
}

void RowStore::TableLog::Load(const std::string& index_path) {
  // Mapped, not read: the row locations (4 bytes a row) are copied once, into where_, and
  // the file's pages stay the page cache's.
  const MappedFile file(index_path);
  const std::string_view bytes = file.bytes();
  uint32_t crc = 0;
  const auto crc_at = static_cast<int64_t>(bytes.size()) - kCrcBytes;
  if (crc_at >= 0) std::memcpy(&crc, bytes.data() + crc_at, kCrcBytes);
  if (crc_at < 0 || crc != Crc32c(0, bytes.data(), static_cast<size_t>(crc_at)))
    Throw(StatusCode::kDataLoss, "row store index ", index_path, " fails its checksum");
  std::vector<std::pair<uint32_t, int64_t>> segments;
  ParseIndex(index_path, bytes.substr(0, static_cast<size_t>(crc_at)), &segments);
  for (const auto& [id, records] : segments) OpenSealedSegment(id, records);
  CountLive(index_path);
}

void RowStore::TableLog::ParseIndex(const std::string& path, std::string_view bytes,
                                    std::vector<std::pair<uint32_t, int64_t>>* segments) {
  const std::string context = "row store index " + path;
  ByteReader r(bytes, context.c_str());
  if (r.Get<uint64_t>("magic") != kIndexMagic || r.Get<uint32_t>("version") != kVersion)
    Throw(StatusCode::kDataLoss, context, " is not a version ", kVersion, " row store index");
  const auto table = r.Get<int32_t>("table");
  const auto width = r.Get<int64_t>("width");
  per_segment_ = r.Get<int64_t>("records per segment");
  const auto ids = r.GetArray<uint32_t>("segments");
  const auto records = r.GetArray<int64_t>("segment records");
  r.GetArray("row locations", &where_);
  r.ExpectEnd();
  if (table != table_ || width != width_ || static_cast<int64_t>(where_.size()) != rows_)
    Throw(StatusCode::kDataLoss, context, " holds table ", table, ": ", where_.size(),
          " rows of width ", width, "; the store's table ", table_, " has ", rows_,
          " rows of width ", width_);
  if (per_segment_ < 1 || per_segment_ > kNowhere || ids.size() != records.size())
    Throw(StatusCode::kDataLoss, context, " has ", per_segment_, " records per segment and ",
          ids.size(), " segments with ", records.size(), " record counts");
  for (size_t i = 0; i < ids.size(); ++i) segments->emplace_back(ids[i], records[i]);
}

void RowStore::TableLog::OpenSealedSegment(uint32_t id, int64_t records) {
  const std::string path = SegmentPath(dir_, id);
  // (id + 1) * per_segment_ <= kNowhere, without the product (both near 2^32 overflow it).
  if (int64_t{id} + 1 > kNowhere / per_segment_ || records < 0 || records > per_segment_ ||
      (id < segments_.size() && segments_[id].in_use))
    Throw(StatusCode::kDataLoss, "row store index ", IndexPath(dir_), ": segment ", id, " with ",
          records, " records is out of range or listed twice");
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT)
    Throw(StatusCode::kDataLoss, "row store file ", path, ": missing (its index lists it)");
  const OpenFileCache::Handle fd = SegmentFile(id, path);
  std::string header(kHeaderBytes, '\0');
  ReadAll(fd->get(), header.data(), kHeaderBytes, 0, path);
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) ThrowErrno(path, "cannot stat");
  if (header != SegmentHeader(table_, width_) ||
      st.st_size < kHeaderBytes + records * record_bytes_)
    Throw(StatusCode::kDataLoss, "row store file ", path, ": ",
          header != SegmentHeader(table_, width_)
              ? "not a segment of table " + std::to_string(table_) + " with rows of width " +
                    std::to_string(width_)
              : "shorter than its " + std::to_string(records) + " records");
  if (id >= segments_.size()) segments_.resize(id + 1);
  segments_[id] = Segment{true, records, 0, true};
  ++in_use_;
}

void RowStore::TableLog::CountLive(const std::string& path) {
  for (size_t id = 0; id < where_.size(); ++id) {
    const uint32_t location = where_[id];
    if (location == kNowhere) continue;
    const uint64_t segment = location / per_segment_;
    if (segment >= segments_.size() || !segments_[segment].in_use ||
        static_cast<int64_t>(location % per_segment_) >= segments_[segment].records)
      Throw(StatusCode::kDataLoss, "row store index ", path, ": id ", id, " is at record ",
            location % per_segment_, " of segment ", segment, ", which the index does not hold");
    ++segments_[segment].live;
    ++live_;
  }
  for (int64_t id = 0; id < static_cast<int64_t>(segments_.size()); ++id)
    if (!segments_[id].in_use) free_.insert(id);
}

// ---- the store -------------------------------------------------------------------------

namespace {

void CheckOptions(const RowStoreOptions& options) {
  if (options.path.empty()) ThrowInvalid("row store: path is empty");
  if (options.max_open_files < 0)
    ThrowInvalid("row store: max_open_files must be >= 0, got ", options.max_open_files);
  std::set<int32_t> seen;
  for (size_t i = 0; i < options.tables.size(); ++i) {
    const RowStoreTable& t = options.tables[i];
    if (t.table < 0 || !seen.insert(t.table).second)
      ThrowInvalid("row store: tables[", i, "].table must be >= 0 and distinct, got ", t.table);
    if (t.rows < 0 || t.rows >= int64_t{kNowhere})
      ThrowInvalid("row store: tables[", i, "].rows must be in [0, ", kNowhere, "), got ", t.rows);
    if (t.width < 1 || t.width > RowStore::kMaxWidth)
      ThrowInvalid("row store: tables[", i, "].width must be in [1, ", RowStore::kMaxWidth,
                   "], got ", t.width);
    if (t.segment_bytes < 1 || t.segment_bytes > int64_t{1} << 31)
      ThrowInvalid("row store: tables[", i, "].segment_bytes must be in [1, 2^31], got ",
                   t.segment_bytes);
  }
}

// The tables of the directory's index files; kDataLoss naming a file that is not the
// store's (or is of a table not declared).
std::set<int32_t> IndexedTables(const std::string& dir, const std::vector<bool>& declared) {
  std::set<int32_t> indexed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int32_t table = -1;
    int64_t segment = 0;
    if (!ParseFileName(name, &table, &segment) || table >= static_cast<int32_t>(declared.size()) ||
        !declared[static_cast<size_t>(table)])
      Throw(StatusCode::kDataLoss, "row store ", dir, ": ", name,
            " is not a file of this store's tables (a store of another model, or not a store)");
    if (segment < 0) indexed.insert(table);
  }
  if (ec) Throw(StatusCode::kIo, "row store ", dir, ": cannot list: ", ec.message());
  return indexed;
}

}  // namespace

RowStore::RowStore(const RowStoreOptions& options) : path_(options.path) {
  CheckOptions(options);
  if (options.max_open_files > 0)
    own_files_ = std::make_unique<OpenFileCache>(options.max_open_files);
  files_ = own_files_ ? own_files_.get() : &OpenFileCache::ProcessWide();
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec) Throw(StatusCode::kIo, "row store ", path_, ": cannot create: ", ec.message());
  try {
    OpenTables(options);
  } catch (...) {
    files_->EraseUnder(path_);  // the segments a failed load opened (no destructor runs)
    throw;
  }
}

void RowStore::OpenTables(const RowStoreOptions& options) {
  std::vector<bool> declared;
  for (const RowStoreTable& t : options.tables) {
    const auto at = static_cast<size_t>(t.table);
    if (at >= logs_.size()) logs_.resize(at + 1), declared.resize(at + 1, false);
    logs_[at] = std::make_unique<TableLog>(path_, t, files_);
    declared[at] = true;
  }
  const std::set<int32_t> indexed = IndexedTables(path_, declared);
  for (const RowStoreTable& t : options.tables) {
    if (indexed.count(t.table) != 0)
      logs_[static_cast<size_t>(t.table)]->Load(path_ + "/" + std::to_string(t.table) +
                                                kIndexSuffix);
    else if (!fs::is_empty(path_))
      Throw(StatusCode::kDataLoss, "row store ", path_, ": the index of table ", t.table,
            " is missing");
  }
}

RowStore::~RowStore() {
  logs_.clear();  // their open segments' descriptors first
  files_->EraseUnder(path_);
}

RowStore::TableLog& RowStore::Log(int32_t table) const {
  if (table < 0 || static_cast<size_t>(table) >= logs_.size() || !logs_[table])
    ThrowInvalid("row store: table ", table, " is not one of the store's tables");
  return *logs_[static_cast<size_t>(table)];
}

void RowStore::Write(int32_t table, const int64_t* ids, int64_t n, const float* values) {
  TableLog& log = Log(table);
  if (n < 0) ThrowInvalid("row store: the number of ids must be >= 0, got ", n);
  if (n > 0 && (ids == nullptr || values == nullptr))
    ThrowInvalid("row store: ", ids == nullptr ? "ids" : "values", " is NULL");
  log.Write(ids, n, values);
}

int64_t RowStore::Read(int32_t table, const int64_t* ids, int64_t n, float* values,
                       bool* found) const {
  const TableLog& log = Log(table);
  if (n < 0) ThrowInvalid("row store: the number of ids must be >= 0, got ", n);
  if (n > 0 && (ids == nullptr || values == nullptr || found == nullptr))
    ThrowInvalid("row store: ",
                 ids == nullptr      ? "ids"
                 : values == nullptr ? "values"
                                     : "found",
                 " is NULL");
  return log.Read(ids, n, values, found);
}

void RowStore::CopyTo(const std::string& dir) {
  std::error_code ec;
  if (!fs::create_directory(dir, ec) || ec)
    Throw(StatusCode::kIo, "row store ", path_, ": cannot copy to ", dir, ": ",
          ec ? ec.message() : std::string("it exists"));
  try {
    for (const auto& log : logs_)
      if (log) log->CopyTo(dir);
    FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0 || ::fsync(fd.get()) != 0) ThrowErrno(dir, "cannot sync the directory");
  } catch (...) {
    fs::remove_all(dir, ec);
    throw;
  }
}

RowStoreStats RowStore::stats(int32_t table) const { return Log(table).stats(); }

}  // namespace dlrm
