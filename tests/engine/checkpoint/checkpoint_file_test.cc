#include "engine/checkpoint/checkpoint_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/status.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Expects `fn` to throw dlrm::Error with `code` and a message containing every fragment.
template <typename Fn>
void ExpectError(Fn&& fn, StatusCode code, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected " << StatusCodeName(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
}

// The temporary files WriteAtomic may leave behind in dir.
std::vector<std::string> TempFilesIn(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) found.push_back(name);
  }
  return found;
}

struct Tensors {
  std::vector<float> weights{1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};  // [2, 3]
  std::vector<double> moments{0.1, 0.2, 0.3, 0.4};                      // [4]
  std::vector<int64_t> steps{int64_t{1} << 40, -1, 42};                 // [3, 1]
  std::vector<float> empty;                                             // [0, 5]
  double scalar = 2.718281828;                                          // []
};

CheckpointWriter MakeWriter(const Tensors& t) {
  CheckpointWriter w;
  w.AddTensor("dense/weights", checkpoint::TensorEntry::FLOAT32, {2, 3}, t.weights.data(),
              t.weights.size() * sizeof(float));
  w.AddTensor("optimizer/moments", checkpoint::TensorEntry::FLOAT64, {4}, t.moments.data(),
              t.moments.size() * sizeof(double));
  w.AddTensor("steps", checkpoint::TensorEntry::INT64, {3, 1}, t.steps.data(),
              t.steps.size() * sizeof(int64_t));
  w.AddTensor("empty", checkpoint::TensorEntry::FLOAT32, {0, 5}, nullptr, 0);
  w.AddTensor("scalar", checkpoint::TensorEntry::FLOAT64, {}, &t.scalar, sizeof(double));
  w.SetMetadata("config", "embedding_dim: 16");
  w.SetMetadata("binary", std::string("a\0b", 3));
  return w;
}

// Writes the standard test checkpoint into a fresh directory and returns its path.
std::string WriteStandard(const std::string& test_name) {
  const std::string path = testing::TempDir(test_name) + "/model.ckpt";
  const Tensors t;
  MakeWriter(t).WriteAtomic(path);
  return path;
}

void AppendLe32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// A checkpoint assembled by hand, with a correct checksum, to reach the checks that come
// after the checksum.
std::string AssembleRaw(const std::string& header_bytes, const std::string& payload,
                        uint32_t version = 1) {
  std::string out = "DLRMCKPT";
  AppendLe32(&out, version);
  AppendLe32(&out, static_cast<uint32_t>(header_bytes.size()));
  out += header_bytes;
  out += payload;
  AppendLe32(&out, Crc32c(0, out.data(), out.size()));
  out += "DLRMEND!";
  return out;
}

std::string Assemble(const checkpoint::CheckpointHeader& header, const std::string& payload,
                     uint32_t version = 1) {
  return AssembleRaw(header.SerializeAsString(), payload, version);
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, "", 0), 0u);
  const std::string zeros(32, '\0'), ones(32, '\xFF');
  EXPECT_EQ(Crc32c(0, zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(0, ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(0, ascending.data(), ascending.size()), 0x46DD794Eu);
}

TEST(Crc32cTest, IncrementalEqualsWhole) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 131 + 7) % 251);
  const uint32_t whole = Crc32c(0, data.data(), data.size());
  for (size_t split = 0; split <= 40; ++split) {
    const uint32_t first = Crc32c(0, data.data(), split);
    EXPECT_EQ(Crc32c(first, data.data() + split, data.size() - split), whole) << split;
  }
  // Misaligned starts exercise the 8-byte path from every offset.
  for (size_t offset = 1; offset < 8; ++offset) {
    const std::string tail = data.substr(offset);
    EXPECT_EQ(Crc32c(0, data.data() + offset, data.size() - offset),
              Crc32c(0, tail.data(), tail.size()));
  }
}

TEST(CheckpointFileTest, RoundTripsTensorsAndMetadata) {
  const std::string path = WriteStandard("ckpt_round_trip");
  const Tensors t;
  const CheckpointReader reader(path);
  EXPECT_THAT(reader.TensorNames(),
              ElementsAre("dense/weights", "empty", "optimizer/moments", "scalar", "steps"));
  EXPECT_TRUE(reader.HasTensor("steps"));
  EXPECT_FALSE(reader.HasTensor("nope"));

  std::vector<float> weights(6);
  reader.ReadTensor("dense/weights", checkpoint::TensorEntry::FLOAT32, {2, 3}, weights.data());
  EXPECT_EQ(weights, t.weights);
  std::vector<double> moments(4);
  reader.ReadTensor("optimizer/moments", checkpoint::TensorEntry::FLOAT64, {4}, moments.data());
  EXPECT_EQ(moments, t.moments);
  std::vector<int64_t> steps(3);
  reader.ReadTensor("steps", checkpoint::TensorEntry::INT64, {3, 1}, steps.data());
  EXPECT_EQ(steps, t.steps);
  reader.ReadTensor("empty", checkpoint::TensorEntry::FLOAT32, {0, 5}, nullptr);
  double scalar = 0;
  reader.ReadTensor("scalar", checkpoint::TensorEntry::FLOAT64, {}, &scalar);
  EXPECT_EQ(scalar, t.scalar);

  EXPECT_EQ(reader.Metadata("config"), "embedding_dim: 16");
  EXPECT_EQ(reader.Metadata("binary"), std::string("a\0b", 3));
  EXPECT_EQ(reader.metadata().size(), 2u);
}

TEST(CheckpointFileTest, LayoutMatchesSpecification) {
  const std::string bytes = testing::FileContents(WriteStandard("ckpt_layout"));
  ASSERT_GT(bytes.size(), 28u);
  EXPECT_EQ(bytes.substr(0, 8), "DLRMCKPT");
  EXPECT_EQ(bytes.substr(bytes.size() - 8), "DLRMEND!");
  uint32_t version = 0, header_bytes = 0, crc = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&header_bytes, bytes.data() + 12, 4);
  std::memcpy(&crc, bytes.data() + bytes.size() - 12, 4);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(crc, Crc32c(0, bytes.data(), bytes.size() - 12));
  checkpoint::CheckpointHeader header;
  ASSERT_TRUE(header.ParseFromArray(bytes.data() + 16, static_cast<int>(header_bytes)));
  EXPECT_EQ(16 + header_bytes + header.payload_bytes() + 12, bytes.size());
  ASSERT_EQ(header.tensors_size(), 5);
  for (const checkpoint::TensorEntry& e : header.tensors()) {
    EXPECT_EQ(e.offset() % 64, 0u) << e.name();
    EXPECT_LE(e.offset() + e.num_bytes(), header.payload_bytes()) << e.name();
  }
  // The float weights sit at their offset, little-endian.
  const checkpoint::TensorEntry& first = header.tensors(0);
  float w0 = 0;
  std::memcpy(&w0, bytes.data() + 16 + header_bytes + first.offset(), 4);
  EXPECT_EQ(w0, 1.5f);
}

TEST(CheckpointFileTest, SameContentGivesIdenticalFiles) {
  const std::string dir = testing::TempDir("ckpt_deterministic");
  const Tensors t;
  CheckpointWriter w = MakeWriter(t);
  for (int i = 0; i < 20; ++i) w.SetMetadata("key" + std::to_string(i), std::to_string(i * i));
  w.WriteAtomic(dir + "/a.ckpt");
  w.WriteAtomic(dir + "/b.ckpt");
  EXPECT_EQ(testing::FileContents(dir + "/a.ckpt"), testing::FileContents(dir + "/b.ckpt"));
}

TEST(CheckpointFileTest, LargeTensorStreamsThrough) {
  const std::string path = testing::TempDir("ckpt_large") + "/big.ckpt";
  std::vector<float> big(3 << 20);  // 12 MiB: larger than the write buffer
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) * 0.5f;
  const float small[3] = {1, 2, 3};
  CheckpointWriter w;
  w.AddTensor("small", checkpoint::TensorEntry::FLOAT32, {3}, small, sizeof(small));
  w.AddTensor("big", checkpoint::TensorEntry::FLOAT32, {3, 1 << 20}, big.data(), big.size() * 4);
  w.AddTensor("small2", checkpoint::TensorEntry::FLOAT32, {3}, small, sizeof(small));
  w.WriteAtomic(path);
  const CheckpointReader reader(path);
  std::vector<float> back(big.size());
  reader.ReadTensor("big", checkpoint::TensorEntry::FLOAT32, {3, 1 << 20}, back.data());
  EXPECT_EQ(back, big);
  float small_back[3];
  reader.ReadTensor("small2", checkpoint::TensorEntry::FLOAT32, {3}, small_back);
  EXPECT_EQ(small_back[2], 3.0f);
}

TEST(CheckpointFileTest, OverwritesExistingFile) {
  const std::string path = WriteStandard("ckpt_overwrite");
  const int64_t value = 99;
  CheckpointWriter w;
  w.AddTensor("only", checkpoint::TensorEntry::INT64, {1}, &value, sizeof(value));
  w.WriteAtomic(path);
  const CheckpointReader reader(path);
  EXPECT_THAT(reader.TensorNames(), ElementsAre("only"));
  EXPECT_TRUE(TempFilesIn(fs::path(path).parent_path().string()).empty());
}

TEST(CheckpointFileTest, TruncationDetectedAtEveryLength) {
  const std::string path = WriteStandard("ckpt_truncated");
  const std::string bytes = testing::FileContents(path);
  const std::string cut_path = path + ".cut";
  const size_t size = bytes.size();
  for (const size_t len : {size_t{0}, size_t{5}, size_t{15}, size_t{16}, size_t{27}, size_t{40},
                           size / 2, size - 13, size - 12, size - 8, size - 1}) {
    SCOPED_TRACE(len);
    WriteBytes(cut_path, bytes.substr(0, len));
    ExpectError([&] { CheckpointReader r(cut_path); }, StatusCode::kDataLoss,
                {cut_path, "truncated", "file has " + std::to_string(len)});
  }
  // The exact expected size is named once the header is readable.
  WriteBytes(cut_path, bytes.substr(0, size - 1));
  ExpectError([&] { CheckpointReader r(cut_path); }, StatusCode::kDataLoss,
              {"expected " + std::to_string(size) + " bytes"});
  // Trailing bytes are as wrong as missing ones.
  WriteBytes(cut_path, bytes + "x");
  ExpectError([&] { CheckpointReader r(cut_path); }, StatusCode::kDataLoss, {cut_path});
}

TEST(CheckpointFileTest, EveryFlippedByteDetected) {
  const std::string path = WriteStandard("ckpt_flipped");
  const std::string bytes = testing::FileContents(path);
  const std::string bad_path = path + ".bad";
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (const unsigned char mask : {0x01, 0x80}) {
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(corrupt[i] ^ mask);
      WriteBytes(bad_path, corrupt);
      try {
        CheckpointReader r(bad_path);
        ADD_FAILURE() << "flip of byte " << i << " (mask " << int{mask} << ") not detected";
      } catch (const Error& e) {
        ASSERT_EQ(e.code(), StatusCode::kDataLoss) << "byte " << i << ": " << e.what();
        ASSERT_THAT(e.what(), HasSubstr(bad_path));
      }
    }
  }
}

TEST(CheckpointFileTest, CorruptionMessagesSayWhatIsWrong) {
  const std::string path = WriteStandard("ckpt_messages");
  const std::string bytes = testing::FileContents(path);
  const std::string bad = path + ".bad";
  std::string c = bytes;
  c[0] = 'X';
  WriteBytes(bad, c);
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {bad, "bad magic"});

  c = bytes;
  c[8] = 7;  // version
  WriteBytes(bad, c);
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"version 7"});

  c = bytes;
  c[bytes.size() - 12 - 100] ^= 0x10;  // payload
  WriteBytes(bad, c);
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {bad, "checksum mismatch"});

  c = bytes;
  c[bytes.size() - 10] ^= 0x01;  // the stored CRC itself
  WriteBytes(bad, c);
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"checksum mismatch"});

  c = bytes;
  c[bytes.size() - 1] = '?';
  WriteBytes(bad, c);
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"end marker"});

  WriteBytes(bad, "this is not a checkpoint, just some text that is long enough");
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"bad magic"});
}

TEST(CheckpointFileTest, InconsistentEntriesDetectedBehindValidChecksum) {
  const std::string bad = testing::TempDir("ckpt_entries") + "/bad.ckpt";
  const std::string payload(128, '\0');
  const auto header_with = [](const char* name, int dtype, std::vector<int64_t> shape,
                              uint64_t offset, uint64_t num_bytes) {
    checkpoint::CheckpointHeader h;
    h.set_payload_bytes(128);
    checkpoint::TensorEntry* e = h.add_tensors();
    e->set_name(name);
    e->set_dtype(static_cast<checkpoint::TensorEntry::DType>(dtype));
    for (const int64_t d : shape) e->add_shape(d);
    e->set_offset(offset);
    e->set_num_bytes(num_bytes);
    return h;
  };
  // Sanity: the hand-assembled file itself is valid.
  WriteBytes(bad,
             Assemble(header_with("t", checkpoint::TensorEntry::FLOAT32, {4}, 64, 16), payload));
  EXPECT_TRUE(CheckpointReader(bad).HasTensor("t"));

  WriteBytes(bad,
             Assemble(header_with("t", checkpoint::TensorEntry::FLOAT32, {4}, 120, 16), payload));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {bad, "'t'", "outside"});
  WriteBytes(bad,
             Assemble(header_with("t", checkpoint::TensorEntry::FLOAT32, {4}, ~uint64_t{0} - 3, 16),
                      payload));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"'t'", "outside"});
  WriteBytes(bad,
             Assemble(header_with("t", checkpoint::TensorEntry::FLOAT64, {4}, 0, 16), payload));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"'t'", "needs 32 bytes"});
  WriteBytes(bad, Assemble(header_with("t", checkpoint::TensorEntry::INT64, {-1}, 0, 16), payload));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"'t'", "shape"});
  WriteBytes(
      bad, Assemble(header_with("t", checkpoint::TensorEntry::INT64, {int64_t{1} << 62, 8}, 0, 16),
                    payload));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"'t'", "shape"});
  {
    // dtype 9 is no DType; the generated setter refuses it, so encode the entry by hand.
    checkpoint::TensorEntry entry;
    entry.set_name("t");
    entry.add_shape(4);
    entry.set_offset(0);
    entry.set_num_bytes(16);
    std::string entry_bytes = entry.SerializeAsString();
    entry_bytes += std::string{0x10, 9};  // field 2 (dtype), varint 9
    std::string header_bytes{0x0A, static_cast<char>(entry_bytes.size())};  // field 1, bytes
    header_bytes += entry_bytes;
    header_bytes += std::string{0x18, static_cast<char>(0x80), 0x01};  // payload_bytes = 128
    WriteBytes(bad, AssembleRaw(header_bytes, payload));
    ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"'t'", "dtype"});
  }
  WriteBytes(bad,
             Assemble(header_with("t", checkpoint::TensorEntry::FLOAT32, {4}, 0, 16), payload, 2));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"version 2"});

  checkpoint::CheckpointHeader dup = header_with("t", checkpoint::TensorEntry::FLOAT32, {4}, 0, 16);
  *dup.add_tensors() = dup.tensors(0);
  WriteBytes(bad, Assemble(dup, payload));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"duplicate", "'t'"});

  checkpoint::CheckpointHeader no_payload_size =
      header_with("t", checkpoint::TensorEntry::FLOAT32, {4}, 0, 16);
  no_payload_size.clear_payload_bytes();
  WriteBytes(bad, Assemble(no_payload_size, payload));
  ExpectError([&] { CheckpointReader r(bad); }, StatusCode::kDataLoss, {"payload_bytes"});
}

TEST(CheckpointFileTest, WrongRequestsNameTheTensor) {
  const CheckpointReader reader(WriteStandard("ckpt_requests"));
  std::vector<float> buf(64);
  ExpectError(
      [&] {
        reader.ReadTensor("steps", checkpoint::TensorEntry::FLOAT32, {3, 1}, buf.data());
      },
      StatusCode::kInvalidArgument, {"'steps'", "INT64", "FLOAT32"});
  ExpectError(
      [&] {
        reader.ReadTensor("dense/weights", checkpoint::TensorEntry::FLOAT32, {3, 2}, buf.data());
      },
      StatusCode::kInvalidArgument, {"'dense/weights'", "[3, 2]", "[2, 3]"});
  ExpectError(
      [&] {
        reader.ReadTensor("dense/weights", checkpoint::TensorEntry::FLOAT32, {6}, buf.data());
      },
      StatusCode::kInvalidArgument, {"'dense/weights'"});
  ExpectError(
      [&] { reader.ReadTensor("missing", checkpoint::TensorEntry::FLOAT32, {1}, buf.data()); },
      StatusCode::kNotFound, {"'missing'"});
  ExpectError([&] { reader.Metadata("absent_key"); }, StatusCode::kNotFound, {"absent_key"});
}

TEST(CheckpointFileTest, AddTensorValidates) {
  CheckpointWriter w;
  const float data[6] = {};
  ExpectError(
      [&] {
        w.AddTensor("x", checkpoint::TensorEntry::FLOAT32, {2, 3}, data, 20);
      },
      StatusCode::kInvalidArgument, {"'x'", "24 bytes", "20"});
  ExpectError(
      [&] {
        w.AddTensor("x", checkpoint::TensorEntry::FLOAT32, {-2, 3}, data, 24);
      },
      StatusCode::kInvalidArgument, {"'x'", "shape"});
  ExpectError(
      [&] {
        w.AddTensor("x", checkpoint::TensorEntry::FLOAT32, {2, 3}, nullptr, 24);
      },
      StatusCode::kInvalidArgument, {"'x'", "null"});
  ExpectError(
      [&] {
        w.AddTensor("", checkpoint::TensorEntry::FLOAT32, {2, 3}, data, 24);
      },
      StatusCode::kInvalidArgument, {"name"});
  w.AddTensor("x", checkpoint::TensorEntry::FLOAT32, {2, 3}, data, 24);
  ExpectError([&] { w.AddTensor("x", checkpoint::TensorEntry::FLOAT32, {6}, data, 24); },
              StatusCode::kInvalidArgument, {"duplicate", "'x'"});
}

TEST(CheckpointFileTest, FailedWriteLeavesOldFileAndNoTemp) {
  const std::string standard = WriteStandard("ckpt_failed_write");
  const std::string dir = fs::path(standard).parent_path().string();
  // A file name of 250 bytes is legal, but its temporary's ("<name>.tmp.<pid>.<n>") is
  // longer than any file name may be: creating the temporary fails.
  const std::string path = dir + "/" + std::string(250, 'c');
  WriteBytes(path, testing::FileContents(standard));
  const std::string before = testing::FileContents(path);
  const int64_t value = 1;
  CheckpointWriter w;
  w.AddTensor("new", checkpoint::TensorEntry::INT64, {1}, &value, sizeof(value));
  ExpectError([&] { w.WriteAtomic(path); }, StatusCode::kIo, {path, "File name too long"});
  EXPECT_EQ(testing::FileContents(path), before);
  EXPECT_TRUE(CheckpointReader(path).HasTensor("steps"));
  EXPECT_TRUE(TempFilesIn(dir).empty());
}

// Adversarial finding 6: saves of one path from several threads at once each write their
// own temporary; every save succeeds and every read in between finds a complete file.
TEST(CheckpointFileTest, ConcurrentWritesOfOnePathLeaveACompleteFile) {
  const std::string dir = testing::TempDir("ckpt_concurrent");
  const std::string path = dir + "/shared.ckpt";
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<float> values(1000, static_cast<float>(t));
      for (int i = 0; i < 25; ++i) {
        try {
          CheckpointWriter w;
          w.AddTensor("v", checkpoint::TensorEntry::FLOAT32, {1000}, values.data(), 4000);
          w.WriteAtomic(path);
          std::vector<float> read(1000);
          CheckpointReader(path).ReadTensor("v", checkpoint::TensorEntry::FLOAT32, {1000},
                                            read.data());
          if (read != std::vector<float>(1000, read[0])) ++failures;
        } catch (const Error& e) {
          ADD_FAILURE() << e.what();
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_TRUE(TempFilesIn(dir).empty());
}

// Adversarial finding 7: the temporaries of writers killed mid-write (their process gone)
// are removed by the next write or read of that path; a live writer's, another path's and
// names that are no temporary stay.
TEST(CheckpointFileTest, StaleTemporariesOfDeadWritersAreRemoved) {
  const std::string path = WriteStandard("ckpt_stale_temps");
  const std::string dir = fs::path(path).parent_path().string();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // `child` names no process now
  const std::string dead = std::to_string(child), self = std::to_string(::getpid());
  const std::vector<std::string> stale = {path + ".tmp." + dead + ".3", path + ".tmp." + dead};
  const std::vector<std::string> kept = {path + ".tmp." + self + ".999", path + ".tmp.1.0",
                                         dir + "/other.ckpt.tmp." + dead + ".0",
                                         path + ".tmp.x" + dead + ".0"};
  for (const std::string& f : stale) WriteBytes(f, "partial");
  for (const std::string& f : kept) WriteBytes(f, "partial");
  CheckpointWriter w;
  const int64_t value = 7;
  w.AddTensor("steps", checkpoint::TensorEntry::INT64, {1}, &value, sizeof(value));
  w.WriteAtomic(path);
  for (const std::string& f : stale) EXPECT_FALSE(fs::exists(f)) << f;
  for (const std::string& f : kept) EXPECT_TRUE(fs::exists(f)) << f;
  WriteBytes(stale[0], "partial");
  CheckpointReader reader(path);
  EXPECT_FALSE(fs::exists(stale[0]));
  for (const std::string& f : kept) fs::remove(f);
}

// Adversarial finding 11: a device never ends; reading one is refused at once.
TEST(CheckpointFileTest, ADeviceIsNoCheckpoint) {
  ExpectError([] { CheckpointReader reader("/dev/zero"); }, StatusCode::kIo,
              {"/dev/zero", "not a regular file"});
}

// Restores a resource limit and a signal disposition when the test ends.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of a signal
    rlimit limited = old_;
    limited.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &limited) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
  bool ok_ = false;
};

TEST(CheckpointFileTest, WriteFailingMidwayLeavesOldFileAndNoTemp) {
  const std::string path = WriteStandard("ckpt_midway");
  const std::string dir = fs::path(path).parent_path().string();
  const std::string before = testing::FileContents(path);
  std::vector<double> big(1 << 20);  // 8 MiB, far over the limit below
  CheckpointWriter w;
  w.AddTensor("big", checkpoint::TensorEntry::FLOAT64, {1 << 20}, big.data(), big.size() * 8);
  {
    FileSizeLimit limit(1 << 16);
    ASSERT_TRUE(limit.ok());
    ExpectError([&] { w.WriteAtomic(path); }, StatusCode::kIo, {path, "File too large"});
  }
  EXPECT_EQ(testing::FileContents(path), before);
  EXPECT_TRUE(TempFilesIn(dir).empty());
}

TEST(CheckpointFileTest, MissingDirectoryIsIoErrorWithoutTemp) {
  const std::string dir = testing::TempDir("ckpt_missing_dir");
  const std::string path = dir + "/no/such/model.ckpt";
  const Tensors t;
  ExpectError([&] { MakeWriter(t).WriteAtomic(path); }, StatusCode::kIo,
              {path, "No such file or directory"});
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(CheckpointFileTest, UnreadablePathIsIoError) {
  const std::string dir = testing::TempDir("ckpt_unreadable");
  ExpectError([&] { CheckpointReader r(dir + "/absent.ckpt"); }, StatusCode::kIo,
              {dir + "/absent.ckpt", "No such file"});
  ExpectError([&] { CheckpointReader r(dir); }, StatusCode::kIo, {dir});
}

}  // namespace
}  // namespace dlrm
