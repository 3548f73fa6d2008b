// What every extern "C" entry point shares: the per-thread error channel, the guard that
// turns exceptions into status codes, and argument conversions. No engine logic.
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "dlrm/dlrm.h"
#include "engine/core/metrics.h"
#include "engine/core/status.h"
#include "engine/data/batch.h"

namespace dlrm::capi {

// The C ABI's error channel is per thread by contract (like errno).
std::string& LastError();

// Records prefix + message as this thread's last error and returns status. Never throws
// (it runs inside Guard's handlers, at the C boundary): where the text cannot be stored
// (out of memory) the record is "out of memory", which fits the string's own buffer.
inline dlrm_status Fail(dlrm_status status, const char* prefix, const char* message) noexcept {
  std::string& last = LastError();
  try {
    last.assign(prefix);
    last.append(message);
  } catch (...) {
    last.clear();
    try {
      last.assign("out of memory");
    } catch (...) {  // (a short string's own buffer holds it: nothing to allocate)
    }
  }
  return status;
}

// Runs fn, converting any exception into a status code and message. Never throws.
template <typename Fn>
dlrm_status Guard(Fn&& fn) noexcept {
  try {
    fn();
    return DLRM_OK;
  } catch (const dlrm::Error& e) {
    return Fail(static_cast<dlrm_status>(e.code()), "", e.what());
  } catch (const std::bad_alloc&) {
    return Fail(DLRM_RESOURCE_EXHAUSTED, "", "out of memory");
  } catch (const std::exception& e) {
    return Fail(DLRM_INTERNAL, "internal error: ", e.what());
  } catch (...) {
    return Fail(DLRM_INTERNAL, "", "internal error: unknown exception");
  }
}

inline void RequireNotNull(const void* ptr, const char* name) {
  if (ptr == nullptr) dlrm::ThrowInvalid(name, " is NULL");
}

// A caller's element count as the engine's int64: a buffer holds at most INT64_MAX
// elements, so a larger size_t (SIZE_MAX as "large enough") means that many.
inline int64_t ToCount(size_t n) {
  return n > static_cast<size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(n);
}

inline dlrm::BatchView ToView(const dlrm_batch* batch, const char* name) {
  RequireNotNull(batch, name);
  if (batch->struct_size < sizeof(dlrm_batch))
    dlrm::ThrowInvalid(name, "->struct_size is ", batch->struct_size,
                       "; set it to sizeof(dlrm_batch) = ", sizeof(dlrm_batch));
  dlrm::BatchView view;
  view.batch_size = batch->batch_size;
  view.num_dense = batch->num_dense;
  view.dense = batch->dense;
  view.labels = batch->labels;
  view.num_sparse = batch->num_sparse;
  view.lengths = batch->lengths;
  view.num_ids = batch->num_ids;
  view.ids = batch->ids;
  view.weights = batch->weights;
  return view;
}

// An array of batches (evaluation), each checked like ToView and named batches[i].
inline std::vector<dlrm::BatchView> ToViews(const dlrm_batch* batches, size_t num_batches) {
  RequireNotNull(batches, "batches");
  std::vector<dlrm::BatchView> views;
  for (size_t i = 0; i < num_batches; ++i) {
    const std::string name = "batches[" + std::to_string(i) + "]";
    views.push_back(ToView(&batches[i], name.c_str()));
  }
  return views;
}

// Checks out's struct_size, then fills it.
inline void WriteEvalResult(const dlrm::EvalResult& result, dlrm_eval_result* out) {
  RequireNotNull(out, "out");
  if (out->struct_size < sizeof(dlrm_eval_result))
    dlrm::ThrowInvalid("out->struct_size is ", out->struct_size,
                       "; set it to sizeof(dlrm_eval_result) = ", sizeof(dlrm_eval_result));
  out->log_loss = result.log_loss;
  out->auc = result.auc;
  out->num_samples = result.num_samples;
}

// Strings handed to the caller are malloc'ed so that dlrm_free (free) releases them.
inline char* CopyToMalloc(const std::string& text) {
  char* buffer = static_cast<char*>(std::malloc(text.size() + 1));
  if (buffer == nullptr) throw std::bad_alloc();
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return buffer;
}

}  // namespace dlrm::capi
