// `dlrm export --checkpoint=CKPT --out=FILE [--quantize=int8|int4]
// [--dense_precision=bf16|fp16]`: the compact serving model of a training checkpoint
// (Engine::Export): dense parameters (in 16 bits with --dense_precision), every table's
// weights (row-wise quantized with --quantize) and each DYNAMIC table's ids and rows, without
// optimizer or admission state. `dlrm eval`, the C ABI's dlrm_engine_create_from_checkpoint
// and the Go Predictor load it.
#include <gflags/gflags.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "engine/core/status.h"
#include "engine/engine.h"
#include "tools/commands.h"

DECLARE_string(checkpoint);
DEFINE_string(out, "", "export: where to write the serving model");
DEFINE_string(quantize, "none",
              "export: none, int8 or int4 (row-wise quantized tables, read-only, for serving)");
DEFINE_string(dense_precision, "fp32",
              "export: fp32, bf16 or fp16: the dense parameters (MLPs, cross network) as they "
              "are or rounded to nearest in 16 bits (half their bytes; widened at load)");

namespace dlrm::tools {
namespace {

config::TableConfig::Precision QuantizeFlag() {
  if (FLAGS_quantize == "none") return config::TableConfig::FP32;
  if (FLAGS_quantize == "int8") return config::TableConfig::INT8;
  if (FLAGS_quantize == "int4") return config::TableConfig::INT4;
  ThrowInvalid("--quantize must be none, int8 or int4, got \"", FLAGS_quantize, "\"");
}

config::TableConfig::Precision DensePrecisionFlag() {
  return PrecisionFlag(
      "--dense_precision", FLAGS_dense_precision,
      {config::TableConfig::FP32, config::TableConfig::BF16, config::TableConfig::FP16});
}

}  // namespace

int ExportCommand() {
  if (FLAGS_checkpoint.empty() || FLAGS_out.empty())
    ThrowInvalid("export needs --checkpoint and --out");
  const config::TableConfig::Precision quantize = QuantizeFlag();
  const config::TableConfig::Precision dense = DensePrecisionFlag();
  const std::unique_ptr<Engine> engine = Engine::FromCheckpoint(FLAGS_checkpoint);
  engine->Export(FLAGS_out, quantize, dense);
  std::printf("exported %s (step %lld) to %s: %llu bytes\n", FLAGS_checkpoint.c_str(),
              static_cast<long long>(engine->step()), FLAGS_out.c_str(),
              static_cast<unsigned long long>(std::filesystem::file_size(FLAGS_out)));
  return 0;
}

}  // namespace dlrm::tools
