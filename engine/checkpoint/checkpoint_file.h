// A checkpoint file: named tensors plus string metadata, written atomically and verified
// by checksum on load.
//
// Layout (little-endian):
//   "DLRMCKPT" | u32 format_version | u32 header_bytes | CheckpointHeader (protobuf)
//   | payload (tensors, 64-byte aligned offsets) | u32 CRC32C of all preceding bytes
//   | "DLRMEND!"
// Writing goes to "<path>.tmp.<pid>", is fsync'ed, then renamed over <path> (and the
// directory fsync'ed), so a crash leaves either the old or the new file, never a torn one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.pb.h"
#include "engine/core/crc32c.h"  // Crc32c, the checksum of these files

namespace dlrm {

// Removes the temporaries a writer of `path` left when it was killed mid-write
// ("<path>.tmp.<pid>.<n>" whose process is gone); those of live processes stay. Best
// effort: a directory that cannot be read is left as it is. Called by every write and read.
void RemoveStaleTemporaries(const std::string& path);

// The "format" metadata of the file at `path`, read from its header alone (no checksum):
// "" where there is no regular file, it is no checkpoint file, or its header does not
// parse. For a writer deciding whether a file there may be replaced.
std::string PeekCheckpointFormat(const std::string& path);

class CheckpointWriter {
 public:
  // data is borrowed until WriteAtomic returns.
  void AddTensor(const std::string& name, checkpoint::TensorEntry::DType dtype,
                 std::vector<int64_t> shape, const void* data, size_t num_bytes);
  // The same for a small tensor whose data does not outlive the call: the writer keeps a copy.
  void AddTensorCopy(const std::string& name, checkpoint::TensorEntry::DType dtype,
                     std::vector<int64_t> shape, const void* data, size_t num_bytes);
  void SetMetadata(const std::string& key, const std::string& value);
  // Throws dlrm::Error(kIo) naming the path and the OS error on any failure. Until the
  // new file is renamed into place the temporary is removed and an existing file at path
  // is left as it was; *renamed (when given) says whether that happened, for a failure
  // after it (the directory's sync: the file is the new one, though a crash might still
  // bring back the old). Writes of one path may run at once (threads or processes): each
  // has its own temporary, and the file is always one of them, complete.
  void WriteAtomic(const std::string& path, bool* renamed = nullptr) const;

 private:
  struct Pending {
    checkpoint::TensorEntry entry;
    const void* data;
  };
  std::vector<Pending> tensors_;
  std::vector<std::unique_ptr<const char[]>> copies_;  // AddTensorCopy's data
  std::map<std::string, std::string> metadata_;
};

// Removes the file at `path` if there is one and syncs its directory, so that the removal
// survives a crash. kIo naming the path and the OS error.
void RemoveDurably(const std::string& path);

class CheckpointReader {
 public:
  // Reads and verifies the whole file. Throws dlrm::Error: kIo if it cannot be read or is
  // not a regular file (a device such as /dev/zero never ends), kDataLoss if it is
  // truncated, has a bad magic/version, or fails the checksum.
  explicit CheckpointReader(const std::string& path);

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Throws kNotFound naming the key.
  const std::string& Metadata(const std::string& key) const;
  bool HasTensor(const std::string& name) const;
  // Copies the tensor into dst after checking dtype and shape; throws kNotFound if absent
  // and kInvalidArgument naming the tensor, expected and found shape on mismatch.
  void ReadTensor(const std::string& name, checkpoint::TensorEntry::DType dtype,
                  const std::vector<int64_t>& shape, void* dst) const;
  // The tensor's shape as the file records it; kNotFound if absent.
  std::vector<int64_t> TensorShape(const std::string& name) const;
  // The tensor's entry (dtype, shape, bytes) as the file records it; kNotFound if absent.
  const checkpoint::TensorEntry& Tensor(const std::string& name) const;
  std::vector<std::string> TensorNames() const;

 private:
  std::string path_;
  std::vector<char> bytes_;  // the whole verified file
  std::map<std::string, checkpoint::TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
  size_t payload_start_ = 0;
};

}  // namespace dlrm
