// libFuzzer harness (issue 17): the checkpoint reader. The input is a checkpoint file;
// its CRC32C trailer is recomputed before each load (a mutation caught by the checksum
// alone teaches nothing: checkpoint_fuzz_test covers that path), so the fuzzer's edits
// reach the header, the metadata and the tensors. Engine::FromCheckpoint and
// Engine::Load of it must succeed or refuse it naming bad input (fuzz_support.h), and a
// refused Load must leave the engine predicting bitwise as before. Seeds: a real
// checkpoint of the small test model after a step (Adam and Adagrad state included), and
// its serving exports with INT8 and INT4 tables (issue 16: the quantized rows' reader) and
// with 16-bit dense tensors (FP16 with INT8 tables, BF16 with FP32 ones), and a checkpoint
// of the same model with BF16 tables (BFLOAT16 tensors).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/seal_checkpoint.h"
#include "tests/support/test_support.h"

namespace dlrm::fuzz {
namespace {

struct Fixture {
  std::unique_ptr<Engine> engine;
  OwnedBatch batch;
  std::vector<float> want;         // the engine's predictions of batch
  std::string dir, clean;          // clean: the seed checkpoint's bytes
  std::vector<std::string> seeds;  // clean, the serving exports', a BF16 checkpoint
};

std::vector<float> Predictions(const Engine& engine, const OwnedBatch& batch) {
  std::vector<float> out(static_cast<size_t>(batch.batch_size));
  engine.Predict(batch.view(), out.data(), batch.batch_size);
  return out;
}

Fixture& TheFixture() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->engine = std::make_unique<Engine>(ParseConfigText(
        testing::SmallConfigText("dense_optimizer { adam {} } sparse_optimizer { adagrad {} }")));
    x->batch = testing::SmallBatch(8, 3);
    x->engine->TrainStep(x->batch.view());
    x->dir = testing::TempDir("fuzz_checkpoint");
    x->engine->Save(x->dir + "/clean.ckpt");
    x->clean = testing::FileContents(x->dir + "/clean.ckpt");
    x->seeds = {x->clean};
    for (const auto precision : {config::TableConfig::INT8, config::TableConfig::INT4}) {
      x->engine->Export(x->dir + "/seed.serving", precision);
      x->seeds.push_back(testing::FileContents(x->dir + "/seed.serving"));
    }
    // 16-bit dense tensors (the loader widens them): FP16 beside INT8 rows, BF16 alone.
    x->engine->Export(x->dir + "/seed.serving", config::TableConfig::INT8,
                      config::TableConfig::FP16);
    x->seeds.push_back(testing::FileContents(x->dir + "/seed.serving"));
    x->engine->Export(x->dir + "/seed.serving", config::TableConfig::FP32,
                      config::TableConfig::BF16);
    x->seeds.push_back(testing::FileContents(x->dir + "/seed.serving"));
    config::DlrmConfig half = x->engine->config();
    for (config::TableConfig& table : *half.mutable_model()->mutable_tables()) {
      table.set_precision(config::TableConfig::BF16);
      table.set_rounding(config::TableConfig::STOCHASTIC);
    }
    Engine half_engine(half);
    half_engine.TrainStep(x->batch.view());
    half_engine.Save(x->dir + "/half.ckpt");
    x->seeds.push_back(testing::FileContents(x->dir + "/half.ckpt"));
    x->want = Predictions(*x->engine, x->batch);
    return x;
  }();
  return *f;
}

}  // namespace
}  // namespace dlrm::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  dlrm::fuzz::WriteSeedsIfAsked(argc, argv, [] { return dlrm::fuzz::TheFixture().seeds; });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlrm::fuzz;
  Fixture& f = TheFixture();
  std::string file(reinterpret_cast<const char*>(data), size);
  SealCheckpointFile(&file);
  const std::string path = f.dir + "/input.ckpt";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << file;
  RefusedOrDone([&] { Predictions(*dlrm::Engine::FromCheckpoint(path), f.batch); });
  bool loaded = false;
  RefusedOrDone([&] {
    f.engine->Load(path);
    loaded = true;
  });
  if (loaded) {
    f.engine->Load(f.dir + "/clean.ckpt");  // back to the seed's state
  } else if (Predictions(*f.engine, f.batch) != f.want) {
    Finding("a refused Load changed the engine's predictions");
  }
  return 0;
}
