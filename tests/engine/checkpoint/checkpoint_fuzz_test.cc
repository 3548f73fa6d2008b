// Deterministic fuzzing of the checkpoint reader (issue 17): a real engine checkpoint
// mutated byte by byte, from a fixed seed, most of the time sealed again with a valid
// CRC32C (so the header, metadata and tensors are read, not only the checksum checked),
// sometimes truncated or extended. Every input must load, or be refused with a dlrm::Error
// (never INTERNAL, never a crash or another exception: ASan/UBSan in the sanitizer build),
// and a refused Engine::Load leaves the engine's predictions bitwise as they were.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/data/batch.h"
#include "engine/engine.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

constexpr int kInputs = 1500;
constexpr size_t kTrailer = 4 + 8;  // CRC32C, "DLRMEND!"

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Recomputes the trailer's CRC32C over everything before it.
void Seal(std::string* file) {
  const size_t body = file->size() - kTrailer;
  const uint32_t crc = Crc32c(0, file->data(), body);
  std::memcpy(&(*file)[body], &crc, sizeof crc);
}

std::string Mutate(const std::string& clean, std::mt19937_64& rng) {
  std::string file = clean;
  const size_t body = file.size() - kTrailer;
  // Most edits hit the first 2 KiB: the header, the metadata (config, step, rates).
  const int edits = 1 + static_cast<int>(rng() % 6);
  for (int e = 0; e < edits; ++e) {
    const size_t span = rng() % 4 == 0 ? body : std::min<size_t>(body, 2048);
    const size_t at = rng() % span;
    static const uint8_t kBytes[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, '0', '9', ':', '{'};
    if (rng() % 2)
      file[at] = static_cast<char>(file[at] ^ (1u << (rng() % 8)));
    else
      file[at] = static_cast<char>(kBytes[rng() % sizeof kBytes]);
  }
  switch (rng() % 8) {
    case 0: file.resize(rng() % file.size()); break;             // truncated
    case 1: file += std::string(1 + rng() % 64, '\x5a'); break;  // extended
    default: Seal(&file);                                        // a valid CRC
  }
  return file;
}

std::vector<float> Predictions(const Engine& engine, const OwnedBatch& batch) {
  std::vector<float> out(static_cast<size_t>(batch.batch_size));
  engine.Predict(batch.view(), out.data(), batch.batch_size);
  return out;
}

// Runs load; true when it returned, false when it threw a dlrm::Error (any code but
// INTERNAL); anything else fails the test.
bool Loads(const std::function<void()>& load) {
  try {
    load();
    return true;
  } catch (const Error& e) {
    if (e.code() == StatusCode::kInternal) ADD_FAILURE() << "INTERNAL: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "escaped as " << e.what();
  }
  return false;
}

TEST(CheckpointFuzz, EveryMutatedFileLoadsOrIsRefusedAndChangesNothing) {
  Engine engine(ParseConfigText(
      testing::SmallConfigText("dense_optimizer { adam {} } sparse_optimizer { adagrad {} }")));
  const OwnedBatch batch = testing::SmallBatch(8, 3);
  engine.TrainStep(batch.view());
  const std::string dir = testing::TempDir("checkpoint_fuzz");
  engine.Save(dir + "/clean.ckpt");
  const std::string clean = testing::FileContents(dir + "/clean.ckpt");
  const std::vector<float> want = Predictions(engine, batch);
  std::mt19937_64 rng(29);
  int created = 0, loaded = 0;
  for (int i = 0; i < kInputs; ++i) {
    const std::string path = dir + "/mutated.ckpt";
    WriteFile(path, Mutate(clean, rng));
    created += Loads([&] { Predictions(*Engine::FromCheckpoint(path), batch); }) ? 1 : 0;
    if (!Loads([&] { engine.Load(path); })) {
      ASSERT_EQ(Predictions(engine, batch), want)
          << "a refused load changed the engine, input " << i;
      continue;
    }
    ++loaded;
    engine.Load(dir + "/clean.ckpt");  // back to the clean state for the next input
  }
  std::cout << "checkpoint fuzz: " << kInputs << " inputs, " << created << " created, " << loaded
            << " loaded\n";
  EXPECT_GT(loaded, 0);  // some mutations (padding, unused bytes) must still load
  EXPECT_LT(loaded, kInputs / 2);
}

}  // namespace
}  // namespace dlrm
