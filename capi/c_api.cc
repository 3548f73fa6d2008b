// The extern "C" shim over dlrm::Engine: checks arguments, catches every exception and
// maps it to a status code plus a thread-local message. No engine logic lives here.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "dlrm/dlrm.h"
#include "engine/config/config.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/engine.h"

namespace dlrm::capi {
// The C ABI's error channel is per thread by contract (like errno).
std::string& LastError() {
  thread_local std::string message;
  return message;
}
}  // namespace dlrm::capi

// The C codes are the engine's StatusCode values: the Guard casts one to the other.
#define DLRM_SAME_CODE(c, k) \
  static_assert(c == static_cast<int>(dlrm::StatusCode::k), #c " != StatusCode::" #k)
DLRM_SAME_CODE(DLRM_OK, kOk);
DLRM_SAME_CODE(DLRM_INVALID_ARGUMENT, kInvalidArgument);
DLRM_SAME_CODE(DLRM_OUT_OF_RANGE, kOutOfRange);
DLRM_SAME_CODE(DLRM_IO, kIo);
DLRM_SAME_CODE(DLRM_NETWORK, kNetwork);
DLRM_SAME_CODE(DLRM_TIMEOUT, kTimeout);
DLRM_SAME_CODE(DLRM_CANCELLED, kCancelled);
DLRM_SAME_CODE(DLRM_INTERNAL, kInternal);
DLRM_SAME_CODE(DLRM_FAILED_PRECONDITION, kFailedPrecondition);
DLRM_SAME_CODE(DLRM_NOT_FOUND, kNotFound);
DLRM_SAME_CODE(DLRM_DATA_LOSS, kDataLoss);
DLRM_SAME_CODE(DLRM_RESOURCE_EXHAUSTED, kResourceExhausted);
#undef DLRM_SAME_CODE
// And the log levels are the engine's LogLevel values.
static_assert(DLRM_LOG_DEBUG == static_cast<int>(dlrm::LogLevel::kDebug));
static_assert(DLRM_LOG_INFO == static_cast<int>(dlrm::LogLevel::kInfo));
static_assert(DLRM_LOG_WARNING == static_cast<int>(dlrm::LogLevel::kWarning));
static_assert(DLRM_LOG_ERROR == static_cast<int>(dlrm::LogLevel::kError));
static_assert(DLRM_LOG_OFF == static_cast<int>(dlrm::LogLevel::kOff));

using namespace dlrm::capi;  // the shim's helpers (capi_internal.h)

struct dlrm_engine {
  std::unique_ptr<dlrm::Engine> impl;
};

namespace {

dlrm::Engine& EngineOf(dlrm_engine* engine) {
  RequireNotNull(engine, "engine");
  if (!engine->impl) dlrm::ThrowInvalid("engine handle is not valid");
  return *engine->impl;
}

dlrm_status CreateWith(dlrm_engine** out,
                       const std::function<std::unique_ptr<dlrm::Engine>()>& make) {
  return Guard([&] {
    RequireNotNull(out, "out");
    auto handle = std::make_unique<dlrm_engine>();
    handle->impl = make();
    *out = handle.release();  // ownership passes to the caller until dlrm_engine_destroy
  });
}

// INVALID_ARGUMENT for a dlrm_engine_export `quantize` that is no DLRM_EXPORT_* value.
[[noreturn]] void ThrowBadExport(int32_t quantize) {
  dlrm::ThrowInvalid("quantize must be DLRM_EXPORT_FP32 (0), DLRM_EXPORT_INT8 (1) or ",
                     "DLRM_EXPORT_INT4 (2), optionally OR'ed with DLRM_EXPORT_DENSE_BF16 ",
                     "(0x100) or DLRM_EXPORT_DENSE_FP16 (0x200), got ", quantize);
}

// The engine's table precision for quantize's low byte (a DLRM_EXPORT_* table value).
dlrm::config::TableConfig::Precision ExportPrecision(int32_t quantize) {
  switch (quantize & 0xFF) {
    case DLRM_EXPORT_FP32: return dlrm::config::TableConfig::FP32;
    case DLRM_EXPORT_INT8: return dlrm::config::TableConfig::INT8;
    case DLRM_EXPORT_INT4: return dlrm::config::TableConfig::INT4;
    default: ThrowBadExport(quantize);
  }
}

// The dense parameters' precision: quantize's other bits.
dlrm::config::TableConfig::Precision ExportDensePrecision(int32_t quantize) {
  switch (quantize & ~0xFF) {
    case 0: return dlrm::config::TableConfig::FP32;
    case DLRM_EXPORT_DENSE_BF16: return dlrm::config::TableConfig::BF16;
    case DLRM_EXPORT_DENSE_FP16: return dlrm::config::TableConfig::FP16;
    default: ThrowBadExport(quantize);
  }
}

}  // namespace

extern "C" {

DLRM_API const char* dlrm_version(void) { return DLRM_VERSION_STRING; }

DLRM_API int32_t dlrm_abi_version(void) { return DLRM_ABI_VERSION_NUMBER; }

DLRM_API const char* dlrm_last_error(void) { return dlrm::capi::LastError().c_str(); }

DLRM_API dlrm_status dlrm_set_log_callback(dlrm_log_fn fn, void* user_data, int32_t min_level) {
  return Guard([&] {
    if (min_level < DLRM_LOG_DEBUG || min_level > DLRM_LOG_OFF)
      dlrm::ThrowInvalid("min_level must be a DLRM_LOG_* value in [", DLRM_LOG_DEBUG, ", ",
                         DLRM_LOG_OFF, "], got ", min_level);
    dlrm::LogSink sink;
    if (fn != nullptr)
      sink = [fn, user_data](dlrm::LogLevel level, const char* file, int line,
                             const std::string& message) {
        fn(user_data, static_cast<int32_t>(level), file, line, message.c_str());
      };
    dlrm::SetLogSink(std::move(sink), static_cast<dlrm::LogLevel>(min_level));
  });
}

DLRM_API const char* dlrm_status_name(dlrm_status status) {
  if (status < 0 || status > DLRM_RESOURCE_EXHAUSTED) return "UNKNOWN";
  return dlrm::StatusCodeName(static_cast<dlrm::StatusCode>(status));
}

DLRM_API void dlrm_free(void* ptr) { std::free(ptr); }

DLRM_API dlrm_status dlrm_engine_create(const char* config_text, dlrm_engine** out) {
  return CreateWith(out, [&] {
    RequireNotNull(config_text, "config_text");
    return std::make_unique<dlrm::Engine>(dlrm::ParseConfigText(config_text));
  });
}

DLRM_API dlrm_status dlrm_engine_create_from_file(const char* config_path, dlrm_engine** out) {
  return CreateWith(out, [&] {
    RequireNotNull(config_path, "config_path");
    return std::make_unique<dlrm::Engine>(dlrm::LoadConfigFile(config_path));
  });
}

DLRM_API dlrm_status dlrm_engine_create_from_checkpoint(const char* checkpoint_path,
                                                        dlrm_engine** out) {
  return CreateWith(out, [&] {
    RequireNotNull(checkpoint_path, "checkpoint_path");
    return dlrm::Engine::FromCheckpoint(checkpoint_path);
  });
}

DLRM_API dlrm_status dlrm_engine_create_from_checkpoint_on(const char* checkpoint_path,
                                                           const char* device, dlrm_engine** out) {
  return CreateWith(out, [&] {
    RequireNotNull(checkpoint_path, "checkpoint_path");
    return dlrm::Engine::FromCheckpoint(checkpoint_path, device == nullptr ? "" : device);
  });
}

DLRM_API void dlrm_engine_destroy(dlrm_engine* engine) {
  std::unique_ptr<dlrm_engine> owned(engine);  // NULL is a no-op
}

DLRM_API dlrm_status dlrm_engine_train_step(dlrm_engine* engine, const dlrm_batch* batch,
                                            float* loss_out) {
  return Guard([&] {
    const float loss = EngineOf(engine).TrainStep(ToView(batch, "batch"));
    if (loss_out) *loss_out = loss;
  });
}

DLRM_API dlrm_status dlrm_engine_train_submit(dlrm_engine* engine, const dlrm_batch* batch,
                                              int64_t* ticket_out) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    const dlrm::BatchView view = ToView(batch, "batch");
    RequireNotNull(ticket_out, "ticket_out");
    *ticket_out = e.SubmitTrainStep(view);
  });
}

DLRM_API dlrm_status dlrm_engine_train_wait(dlrm_engine* engine, int64_t ticket, float* loss_out) {
  return Guard([&] {
    const float loss = EngineOf(engine).WaitTrainStep(ticket);
    if (loss_out) *loss_out = loss;
  });
}

DLRM_API dlrm_status dlrm_engine_predict(dlrm_engine* engine, const dlrm_batch* batch, float* out,
                                         size_t out_len) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    const dlrm::BatchView view = ToView(batch, "batch");
    RequireNotNull(out, "out");
    e.Predict(view, out, ToCount(out_len));
  });
}

DLRM_API dlrm_status dlrm_engine_evaluate(dlrm_engine* engine, const dlrm_batch* batches,
                                          size_t num_batches, dlrm_eval_result* out) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(out, "out");
    WriteEvalResult(e.Evaluate(ToViews(batches, num_batches)), out);
  });
}

DLRM_API dlrm_status dlrm_engine_set_learning_rate(dlrm_engine* engine, int32_t target,
                                                   float learning_rate) {
  return Guard([&] {
    EngineOf(engine).SetLearningRate(static_cast<dlrm::LrTarget>(target), learning_rate);
  });
}

DLRM_API dlrm_status dlrm_engine_get_step(dlrm_engine* engine, int64_t* out) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(out, "out");
    *out = e.step();
  });
}

DLRM_API dlrm_status dlrm_engine_table_stats(dlrm_engine* engine, const char* table,
                                             dlrm_table_stats* out) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(table, "table");
    RequireNotNull(out, "out");
    if (out->struct_size < sizeof(dlrm_table_stats))
      dlrm::ThrowInvalid("out->struct_size is ", out->struct_size,
                         "; set it to sizeof(dlrm_table_stats) = ", sizeof(dlrm_table_stats));
    const dlrm::TableStats s = e.GetTableStats(table);
    out->dynamic = s.dynamic ? 1 : 0;
    out->capacity = s.capacity;
    out->size = s.size;
    out->lookups = s.counts.lookups;
    out->hits = s.counts.hits;
    out->admitted = s.counts.admitted;
    out->evicted = s.counts.evicted;
    out->rejected = s.counts.rejected;
    out->memory_bytes = s.memory_bytes;
  });
}

DLRM_API dlrm_status dlrm_engine_get_config(dlrm_engine* engine, char** out) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(out, "out");
    *out = CopyToMalloc(dlrm::ConfigToText(e.config()));
  });
}

DLRM_API dlrm_status dlrm_engine_parameter_count(dlrm_engine* engine, int64_t* out) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(out, "out");
    *out = static_cast<int64_t>(e.Parameters().size());
  });
}

DLRM_API dlrm_status dlrm_engine_parameter_name(dlrm_engine* engine, int64_t index, char** out) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(out, "out");
    const auto params = e.Parameters();
    if (index < 0 || index >= static_cast<int64_t>(params.size()))
      dlrm::Throw(dlrm::StatusCode::kOutOfRange, "parameter index ", index, " is outside [0, ",
                  params.size(), ")");
    *out = CopyToMalloc(params[index].name);
  });
}

DLRM_API dlrm_status dlrm_engine_parameter_shape(dlrm_engine* engine, const char* name,
                                                 int64_t* shape, int32_t shape_capacity,
                                                 int32_t* ndim) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(name, "name");
    RequireNotNull(shape, "shape");
    RequireNotNull(ndim, "ndim");
    for (const dlrm::ParameterInfo& info : e.Parameters()) {
      if (info.name != name) continue;
      if (shape_capacity < static_cast<int32_t>(info.shape.size()))
        dlrm::ThrowInvalid("shape_capacity is ", shape_capacity, " but parameter \"", name,
                           "\" has ", info.shape.size(), " dimensions");
      std::copy(info.shape.begin(), info.shape.end(), shape);
      *ndim = static_cast<int32_t>(info.shape.size());
      return;
    }
    dlrm::Throw(dlrm::StatusCode::kNotFound, "no parameter named \"", name, "\"");
  });
}

DLRM_API dlrm_status dlrm_engine_read_parameter(dlrm_engine* engine, const char* name, float* out,
                                                size_t out_len) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(name, "name");
    RequireNotNull(out, "out");
    e.ReadParameter(name, out, ToCount(out_len));
  });
}

DLRM_API dlrm_status dlrm_engine_write_parameter(dlrm_engine* engine, const char* name,
                                                 const float* values, size_t len) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(name, "name");
    RequireNotNull(values, "values");
    e.WriteParameter(name, values, ToCount(len));
  });
}

DLRM_API dlrm_status dlrm_engine_save(dlrm_engine* engine, const char* path) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(path, "path");
    e.Save(path);
  });
}

DLRM_API dlrm_status dlrm_engine_export(dlrm_engine* engine, const char* path, int32_t quantize) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(path, "path");
    e.Export(path, ExportPrecision(quantize), ExportDensePrecision(quantize));
  });
}

DLRM_API dlrm_status dlrm_engine_load(dlrm_engine* engine, const char* path) {
  return Guard([&] {
    dlrm::Engine& e = EngineOf(engine);
    RequireNotNull(path, "path");
    e.Load(path);
  });
}

}  // extern "C"
