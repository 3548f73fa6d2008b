#include "engine/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <utility>

#include "engine/core/file_descriptor.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

constexpr char kMagic[8] = {'D', 'L', 'R', 'M', 'C', 'K', 'P', 'T'};
constexpr char kEndMarker[8] = {'D', 'L', 'R', 'M', 'E', 'N', 'D', '!'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kPrefixBytes = 16;   // magic, format_version, header_bytes
constexpr size_t kTrailerBytes = 12;  // CRC32C, end marker
constexpr uint64_t kTensorAlignment = 64;

uint32_t LoadLe32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void StoreLe32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFFu);
}

// ---- helpers ----------------------------------------------------------------------

size_t DTypeSize(checkpoint::TensorEntry::DType dtype) {
  switch (dtype) {
    case checkpoint::TensorEntry::FLOAT32:
    case checkpoint::TensorEntry::UINT32: return 4;
    case checkpoint::TensorEntry::FLOAT64:
    case checkpoint::TensorEntry::INT64: return 8;
    case checkpoint::TensorEntry::BFLOAT16:
    case checkpoint::TensorEntry::FLOAT16: return 2;
    case checkpoint::TensorEntry::UINT8: return 1;
  }
  return 0;
}

std::string DTypeName(int dtype) {
  if (checkpoint::TensorEntry::DType_IsValid(dtype))
    return checkpoint::TensorEntry::DType_Name(static_cast<checkpoint::TensorEntry::DType>(dtype));
  return "dtype " + std::to_string(dtype);
}

template <typename Dims>
std::string ShapeString(const Dims& shape) {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (const int64_t d : shape) {
    os << (first ? "" : ", ") << d;
    first = false;
  }
  os << "]";
  return os.str();
}

// Bytes a tensor of this dtype and shape occupies; false if a dimension is negative or
// the size does not fit in 64 bits.
template <typename Dims>
bool TensorBytes(const Dims& shape, checkpoint::TensorEntry::DType dtype, uint64_t* bytes) {
  uint64_t total = DTypeSize(dtype);
  if (total == 0) return false;
  for (const int64_t d : shape) {
    if (d < 0) return false;
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && total > std::numeric_limits<uint64_t>::max() / ud) return false;
    total *= ud;
  }
  *bytes = total;
  return true;
}

uint64_t AlignUp(uint64_t x) {
  return (x + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

template <typename... Parts>
[[noreturn]] void ThrowCorrupt(const std::string& path, Parts&&... parts) {
  Throw(StatusCode::kDataLoss, "corrupt checkpoint ", path, ": ", std::forward<Parts>(parts)...);
}

[[noreturn]] void ThrowWriteError(const std::string& path, const std::string& what, int err) {
  Throw(StatusCode::kIo, "cannot write checkpoint ", path, ": ", what, ": ", std::strerror(err));
}

// Writes all n bytes, retrying partial writes and EINTR; returns 0 or an errno value.
int WriteFully(int fd, const char* data, size_t n) {
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t written = ::write(fd, data, chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += written;
    n -= static_cast<size_t>(written);
  }
  return 0;
}

// ---- temporary files ------------------------------------------------------------------
// A write goes to "<path>.tmp.<pid>.<n>", n counting the process's writes, created with
// O_EXCL: two saves to one path at once (threads or processes) never share a temporary,
// and the last rename wins with a complete file. A writer killed mid-write leaves its
// temporary behind; the next save or load of that path removes the temporaries whose
// process is gone.

constexpr const char* kTempInfix = ".tmp.";
constexpr int kTempAttempts = 64;  // names tried when some already exist

std::atomic<uint64_t> temp_counter{0};

std::string TempPathFor(const std::string& path) {
  return path + kTempInfix + std::to_string(::getpid()) + "." +
         std::to_string(temp_counter.fetch_add(1));
}

// The writer's pid of a temporary of `base` named "<base>.tmp.<pid>[.<n>]", or 0.
pid_t TempOwner(const std::string& name, const std::string& base) {
  const std::string prefix = base + kTempInfix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return 0;
  const std::string rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  const std::string pid = rest.substr(0, dot);
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  if (dot != std::string::npos &&
      (dot + 1 == rest.size() ||
       rest.find_first_not_of("0123456789", dot + 1) != std::string::npos))
    return 0;
  return static_cast<pid_t>(std::stol(pid));
}

}  // namespace

void RemoveStaleTemporaries(const std::string& path) {
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  const std::string base = p.filename().string();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const pid_t owner = TempOwner(entry.path().filename().string(), base);
    // A pid that no process has now: its writer died (another process may reuse the pid
    // later, which only keeps a stale file a while longer).
    if (owner > 0 && owner != ::getpid() && ::kill(owner, 0) != 0 && errno == ESRCH)
      ::unlink(entry.path().c_str());
  }
}

namespace {

// The temporary file of an atomic write: unlinked on destruction unless committed, so any
// exception on the way leaves nothing behind.
class TempFile {
 public:
  explicit TempFile(const std::string& final_path) : fd_(CreateUnique(final_path, &path_)) {
    owned_ = true;  // only a file this object created may be removed later
  }
  ~TempFile() {
    if (owned_ && !committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

  // Creates a temporary for final_path that did not exist; *path names it.
  static int CreateUnique(const std::string& final_path, std::string* path) {
    int err = 0;
    for (int attempt = 0; attempt < kTempAttempts; ++attempt) {
      *path = TempPathFor(final_path);
      const int fd = ::open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) return fd;
      err = errno;
      if (err != EEXIST) break;
    }
    ThrowWriteError(final_path, "creating " + *path, err);
  }
  int Close() { return fd_.Close(); }
  void Commit() { committed_ = true; }

 private:
  std::string path_;
  FileDescriptor fd_;
  bool owned_ = false;
  bool committed_ = false;
};

// Buffers small writes, passes large ones straight through, and keeps the running CRC of
// everything written, so tensors are streamed to disk without a second in-memory copy.
class CrcSink {
 public:
  CrcSink(const TempFile* file, const std::string& final_path)
      : file_(file), final_path_(final_path) {
    buffer_.reserve(kBufferBytes);
  }

  void Append(const void* data, size_t n) {
    if (n == 0) return;
    crc_ = Crc32c(crc_, data, n);
    const char* bytes = static_cast<const char*>(data);
    if (buffer_.size() + n <= kBufferBytes) {
      buffer_.insert(buffer_.end(), bytes, bytes + n);
      return;
    }
    Flush();
    if (n >= kBufferBytes / 2) {
      Write(bytes, n);
    } else {
      buffer_.insert(buffer_.end(), bytes, bytes + n);
    }
  }

  void AppendZeros(size_t n) {
    static constexpr char kZeros[kTensorAlignment] = {};
    while (n > 0) {
      const size_t chunk = std::min<size_t>(n, sizeof(kZeros));
      Append(kZeros, chunk);
      n -= chunk;
    }
  }

  void Flush() {
    Write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  uint32_t crc() const { return crc_; }
  uint64_t bytes_appended() const { return bytes_written_ + buffer_.size(); }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 20;

  void Write(const char* data, size_t n) {
    if (const int err = WriteFully(file_->fd(), data, n); err != 0)
      ThrowWriteError(final_path_, "writing " + file_->path(), err);
    bytes_written_ += n;
  }

  const TempFile* file_;
  const std::string& final_path_;
  std::vector<char> buffer_;
  uint32_t crc_ = 0;
  uint64_t bytes_written_ = 0;
};

std::string SerializeDeterministic(const checkpoint::CheckpointHeader& header) {
  // Map fields serialize in hash order unless asked otherwise; identical checkpoints
  // should be identical files.
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    header.SerializeToCodedStream(&coded);
  }
  return out;
}

void SyncDirectory(const std::string& final_path) {
  std::string dir = std::filesystem::path(final_path).parent_path().string();
  if (dir.empty()) dir = ".";
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) ThrowWriteError(final_path, "opening directory " + dir, errno);
  // Some file systems cannot fsync a directory (EINVAL); the rename is then as durable as
  // that file system makes it.
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    ThrowWriteError(final_path, "fsync of directory " + dir, errno);
}

// Finds the header's payload_bytes (field 3) at the wire level, skipping every other
// field. The full parse waits until the checksum has vouched for the header: protobuf
// would otherwise complain (and log) about whatever garbage a corrupt header holds.
enum class PeekResult { kFound, kMissing, kMalformed };
PeekResult PeekPayloadBytes(const unsigned char* data, size_t size, uint64_t* payload_bytes) {
  constexpr uint32_t kPayloadBytesField = 3;
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  bool found = false;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      // 0 is both "end of input" and an invalid tag; only the first is fine.
      if (in.CurrentPosition() != static_cast<int>(size)) return PeekResult::kMalformed;
      return found ? PeekResult::kFound : PeekResult::kMissing;
    }
    uint64_t u64 = 0;
    uint32_t u32 = 0;
    switch (tag & 7u) {
      case 0:  // varint
        if (!in.ReadVarint64(&u64)) return PeekResult::kMalformed;
        if ((tag >> 3) == kPayloadBytesField) {
          *payload_bytes = u64;  // the last occurrence wins, as in a full parse
          found = true;
        }
        break;
      case 1:  // fixed64
        if (!in.ReadLittleEndian64(&u64)) return PeekResult::kMalformed;
        break;
      case 2:  // length-delimited
        if (!in.ReadVarint32(&u32) || !in.Skip(static_cast<int>(u32)))
          return PeekResult::kMalformed;
        break;
      case 5:  // fixed32
        if (!in.ReadLittleEndian32(&u32)) return PeekResult::kMalformed;
        break;
      default:  // groups do not occur in this schema
        return PeekResult::kMalformed;
    }
  }
}

std::vector<char> ReadWholeFile(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    Throw(StatusCode::kIo, "cannot read checkpoint ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    Throw(StatusCode::kIo, "cannot read checkpoint ", path, ": fstat: ", std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    Throw(StatusCode::kIo, "cannot read checkpoint ", path, ": ", std::strerror(EISDIR));
  if (!S_ISREG(st.st_mode))
    Throw(StatusCode::kIo, "cannot read checkpoint ", path, ": not a regular file");
  std::vector<char> bytes(static_cast<size_t>(std::max<off_t>(st.st_size, 0)) + 1);
  size_t filled = 0;
  while (true) {
    if (filled == bytes.size()) bytes.resize(bytes.size() * 2);  // the file grew
    const ssize_t n = ::read(fd.get(), bytes.data() + filled, bytes.size() - filled);
    if (n < 0) {
      if (errno == EINTR) continue;
      Throw(StatusCode::kIo, "cannot read checkpoint ", path, ": ", std::strerror(errno));
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  bytes.resize(filled);
  return bytes;
}

}  // namespace

// ---- writer -------------------------------------------------------------------------

void CheckpointWriter::AddTensorCopy(const std::string& name, checkpoint::TensorEntry::DType dtype,
                                     std::vector<int64_t> shape, const void* data,
                                     size_t num_bytes) {
  auto copy = std::make_unique<char[]>(num_bytes);
  if (num_bytes > 0) std::memcpy(copy.get(), data, num_bytes);
  AddTensor(name, dtype, std::move(shape), copy.get(), num_bytes);  // checks before keeping
  copies_.push_back(std::move(copy));
}

void CheckpointWriter::AddTensor(const std::string& name, checkpoint::TensorEntry::DType dtype,
                                 std::vector<int64_t> shape, const void* data, size_t num_bytes) {
  if (name.empty()) ThrowInvalid("CheckpointWriter::AddTensor: empty tensor name");
  for (const Pending& t : tensors_) {
    if (t.entry.name() == name)
      ThrowInvalid("CheckpointWriter::AddTensor: duplicate tensor '", name, "'");
  }
  if (!checkpoint::TensorEntry::DType_IsValid(dtype))
    ThrowInvalid("CheckpointWriter::AddTensor: tensor '", name, "': invalid ", DTypeName(dtype));
  uint64_t expected = 0;
  if (!TensorBytes(shape, dtype, &expected))
    ThrowInvalid("CheckpointWriter::AddTensor: tensor '", name, "': invalid shape ",
                 ShapeString(shape));
  if (expected != num_bytes)
    ThrowInvalid("CheckpointWriter::AddTensor: tensor '", name, "': shape ", ShapeString(shape),
                 " of ", DTypeName(dtype), " needs ", expected, " bytes, got ", num_bytes);
  if (data == nullptr && num_bytes > 0)
    ThrowInvalid("CheckpointWriter::AddTensor: tensor '", name, "': data is null");

  Pending pending;
  pending.entry.set_name(name);
  pending.entry.set_dtype(dtype);
  for (const int64_t d : shape) pending.entry.add_shape(d);
  pending.entry.set_num_bytes(num_bytes);
  pending.data = data;
  tensors_.push_back(std::move(pending));
}

void CheckpointWriter::SetMetadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void CheckpointWriter::WriteAtomic(const std::string& path, bool* renamed) const {
  checkpoint::CheckpointHeader header;
  uint64_t payload_bytes = 0;
  for (const Pending& t : tensors_) {
    checkpoint::TensorEntry* entry = header.add_tensors();
    *entry = t.entry;
    payload_bytes = AlignUp(payload_bytes);
    entry->set_offset(payload_bytes);
    payload_bytes += t.entry.num_bytes();
  }
  header.set_payload_bytes(payload_bytes);
  for (const auto& [key, value] : metadata_) (*header.mutable_metadata())[key] = value;
  const std::string header_bytes = SerializeDeterministic(header);
  if (header_bytes.size() > std::numeric_limits<uint32_t>::max())
    ThrowInvalid("cannot write checkpoint ", path, ": header of ", header_bytes.size(),
                 " bytes exceeds 4 GiB");

  RemoveStaleTemporaries(path);
  TempFile file(path);
  CrcSink sink(&file, path);
  char word[4];
  sink.Append(kMagic, sizeof(kMagic));
  StoreLe32(kFormatVersion, word);
  sink.Append(word, sizeof(word));
  StoreLe32(static_cast<uint32_t>(header_bytes.size()), word);
  sink.Append(word, sizeof(word));
  sink.Append(header_bytes.data(), header_bytes.size());

  const uint64_t payload_start = sink.bytes_appended();
  for (int i = 0; i < header.tensors_size(); ++i) {
    const checkpoint::TensorEntry& entry = header.tensors(i);
    sink.AppendZeros(payload_start + entry.offset() - sink.bytes_appended());
    sink.Append(tensors_[i].data, entry.num_bytes());
  }
  StoreLe32(sink.crc(), word);
  sink.Append(word, sizeof(word));
  sink.Append(kEndMarker, sizeof(kEndMarker));
  sink.Flush();

  if (::fsync(file.fd()) != 0) ThrowWriteError(path, "fsync of " + file.path(), errno);
  if (const int err = file.Close(); err != 0) ThrowWriteError(path, "closing " + file.path(), err);
  if (::rename(file.path().c_str(), path.c_str()) != 0)
    ThrowWriteError(path, "renaming " + file.path(), errno);
  file.Commit();
  if (renamed != nullptr) *renamed = true;
  // The new file is in place now; a failure here still throws, because without the
  // directory sync the rename may not survive a crash.
  SyncDirectory(path);
}

void RemoveDurably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return;
    ThrowWriteError(path, "removing it", errno);
  }
  SyncDirectory(path);
}

// ---- reader -------------------------------------------------------------------------

namespace {

// Where a checkpoint file's parts lie (the format at the top of checkpoint_file.h).
struct Framing {
  uint64_t header_bytes = 0, payload_bytes = 0;
};

// The prefix (magic, version, header size) and the sizes the header gives, checked
// against the file's size; kDataLoss naming what is wrong.
Framing CheckFraming(const std::string& path, const unsigned char* data, size_t size) {
  if (size < kPrefixBytes + kTrailerBytes)
    ThrowCorrupt(path, "truncated: expected at least ", kPrefixBytes + kTrailerBytes,
                 " bytes, file has ", size);
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    ThrowCorrupt(path, "bad magic (not a checkpoint file)");
  const uint32_t version = LoadLe32(data + 8);
  if (version != kFormatVersion)
    ThrowCorrupt(path, "unsupported format version ", version, " (this build reads ",
                 kFormatVersion, ")");
  Framing f;
  f.header_bytes = LoadLe32(data + 12);
  if (kPrefixBytes + f.header_bytes + kTrailerBytes > size)
    ThrowCorrupt(path, "truncated: expected at least ",
                 kPrefixBytes + f.header_bytes + kTrailerBytes, " bytes for a header of ",
                 f.header_bytes, " bytes, file has ", size);
  if (f.header_bytes > static_cast<uint64_t>(std::numeric_limits<int>::max()))
    ThrowCorrupt(path, "header of ", f.header_bytes, " bytes is larger than protobuf allows");
  switch (PeekPayloadBytes(data + kPrefixBytes, f.header_bytes, &f.payload_bytes)) {
    case PeekResult::kFound: break;
    case PeekResult::kMissing: ThrowCorrupt(path, "header lacks payload_bytes");
    case PeekResult::kMalformed: ThrowCorrupt(path, "header does not parse");
  }
  const uint64_t room = size - kPrefixBytes - f.header_bytes - kTrailerBytes;
  if (f.payload_bytes > room) {
    // A corrupt payload_bytes may be huge: name the expected size without overflowing.
    std::ostringstream expected;
    if (f.payload_bytes >
        std::numeric_limits<uint64_t>::max() - kPrefixBytes - f.header_bytes - kTrailerBytes) {
      expected << "more than 2^64";
    } else {
      expected << kPrefixBytes + f.header_bytes + f.payload_bytes + kTrailerBytes;
    }
    ThrowCorrupt(path, "truncated: expected ", expected.str(), " bytes, file has ", size);
  }
  if (f.payload_bytes < room)
    ThrowCorrupt(path, "expected ", kPrefixBytes + f.header_bytes + f.payload_bytes + kTrailerBytes,
                 " bytes, file has ", size, " (trailing data)");
  return f;
}

// The end marker and the CRC32C of everything before the trailer.
void CheckTrailer(const std::string& path, const unsigned char* data, size_t size) {
  if (std::memcmp(data + size - sizeof(kEndMarker), kEndMarker, sizeof(kEndMarker)) != 0)
    ThrowCorrupt(path, "bad end marker");
  const uint32_t stored_crc = LoadLe32(data + size - kTrailerBytes);
  const uint32_t computed_crc = Crc32c(0, data, size - kTrailerBytes);
  if (stored_crc != computed_crc) {
    std::ostringstream os;
    os << std::hex << "stored 0x" << stored_crc << ", computed 0x" << computed_crc;
    ThrowCorrupt(path, "checksum mismatch: ", os.str());
  }
}

// A tensor entry's name, dtype, shape, size and place in the payload.
void CheckTensorEntry(const std::string& path, const checkpoint::TensorEntry& entry,
                      uint64_t payload_bytes) {
  const std::string& name = entry.name();
  if (name.empty()) ThrowCorrupt(path, "a tensor has an empty name");
  if (!entry.has_dtype() || !checkpoint::TensorEntry::DType_IsValid(entry.dtype()))
    ThrowCorrupt(path, "tensor '", name, "': invalid dtype");
  uint64_t expected = 0;
  if (!TensorBytes(entry.shape(), entry.dtype(), &expected))
    ThrowCorrupt(path, "tensor '", name, "': invalid shape ", ShapeString(entry.shape()));
  if (entry.num_bytes() != expected)
    ThrowCorrupt(path, "tensor '", name, "': shape ", ShapeString(entry.shape()), " of ",
                 DTypeName(entry.dtype()), " needs ", expected, " bytes, entry says ",
                 entry.num_bytes());
  if (entry.offset() > payload_bytes || entry.num_bytes() > payload_bytes - entry.offset())
    ThrowCorrupt(path, "tensor '", name, "': bytes [", entry.offset(), ", +", entry.num_bytes(),
                 ") outside the payload of ", payload_bytes, " bytes");
}

}  // namespace

namespace {

// Reads exactly `n` bytes at `offset`; false where the file ends first or a read fails.
bool ReadExactlyAt(int fd, unsigned char* out, size_t n, off_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, out + done, n - done, offset + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

std::string PeekCheckpointFormat(const std::string& path) {
  // Non-blocking: a FIFO at the path must not wait for a writer (a regular file ignores it).
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  unsigned char prefix[kPrefixBytes];
  if (!ReadExactlyAt(fd.get(), prefix, sizeof prefix, 0) ||
      std::memcmp(prefix, kMagic, sizeof(kMagic)) != 0)
    return "";
  const uint32_t header_bytes = LoadLe32(prefix + 12);
  if (kPrefixBytes + header_bytes > static_cast<uint64_t>(st.st_size) ||
      header_bytes > static_cast<uint32_t>(std::numeric_limits<int>::max()))
    return "";
  std::vector<unsigned char> bytes(header_bytes);
  checkpoint::CheckpointHeader header;
  if (!ReadExactlyAt(fd.get(), bytes.data(), bytes.size(), kPrefixBytes) ||
      !header.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return "";
  const auto it = header.metadata().find("format");
  return it == header.metadata().end() ? "" : it->second;
}

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  RemoveStaleTemporaries(path_);
  bytes_ = ReadWholeFile(path_);
  const size_t size = bytes_.size();
  const auto* data = reinterpret_cast<const unsigned char*>(bytes_.data());
  const Framing framing = CheckFraming(path_, data, size);
  CheckTrailer(path_, data, size);
  checkpoint::CheckpointHeader header;
  if (!header.ParseFromArray(data + kPrefixBytes, static_cast<int>(framing.header_bytes)))
    ThrowCorrupt(path_, "header does not parse");
  payload_start_ = kPrefixBytes + framing.header_bytes;
  for (const checkpoint::TensorEntry& entry : header.tensors()) {
    if (tensors_.count(entry.name()) != 0)  // (an empty name is never stored)
      ThrowCorrupt(path_, "duplicate tensor '", entry.name(), "'");
    CheckTensorEntry(path_, entry, framing.payload_bytes);
    tensors_.emplace(entry.name(), entry);
  }
  metadata_.insert(header.metadata().begin(), header.metadata().end());
}

const std::string& CheckpointReader::Metadata(const std::string& key) const {
  const auto it = metadata_.find(key);
  if (it == metadata_.end())
    Throw(StatusCode::kNotFound, "checkpoint ", path_, ": no metadata key '", key, "'");
  return it->second;
}

bool CheckpointReader::HasTensor(const std::string& name) const {
  return tensors_.count(name) != 0;
}

void CheckpointReader::ReadTensor(const std::string& name, checkpoint::TensorEntry::DType dtype,
                                  const std::vector<int64_t>& shape, void* dst) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    Throw(StatusCode::kNotFound, "checkpoint ", path_, ": no tensor '", name, "'");
  const checkpoint::TensorEntry& entry = it->second;
  if (entry.dtype() != dtype)
    ThrowInvalid("checkpoint ", path_, ": tensor '", name, "': expected dtype ", DTypeName(dtype),
                 ", found ", DTypeName(entry.dtype()));
  if (!std::equal(shape.begin(), shape.end(), entry.shape().begin(), entry.shape().end()))
    ThrowInvalid("checkpoint ", path_, ": tensor '", name, "': expected shape ", ShapeString(shape),
                 ", found ", ShapeString(entry.shape()));
  if (entry.num_bytes() == 0) return;
  if (dst == nullptr) ThrowInvalid("checkpoint ", path_, ": tensor '", name, "': dst is null");
  std::memcpy(dst, bytes_.data() + payload_start_ + entry.offset(), entry.num_bytes());
}

const checkpoint::TensorEntry& CheckpointReader::Tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    Throw(StatusCode::kNotFound, "checkpoint ", path_, ": no tensor '", name, "'");
  return it->second;
}

std::vector<int64_t> CheckpointReader::TensorShape(const std::string& name) const {
  const checkpoint::TensorEntry& entry = Tensor(name);
  return {entry.shape().begin(), entry.shape().end()};
}

std::vector<std::string> CheckpointReader::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) names.push_back(name);
  return names;
}

}  // namespace dlrm
