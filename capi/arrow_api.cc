// The extern "C" shim over Arrow input (data/arrow_batch.h): the column mapping's checks
// and the handle. No conversion logic here.
#include <memory>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "dlrm/dlrm.h"
#include "engine/data/arrow_batch.h"

using namespace dlrm::capi;  // the shim's helpers (capi_internal.h)

struct dlrm_arrow_batch {
  dlrm::OwnedBatch batch;
};

namespace {

// n names from a caller's array; a NULL entry is refused, or kept as "" where allowed.
std::vector<std::string> Names(const char* const* names, int32_t n, const char* field,
                               bool null_entries) {
  if (n < 0) dlrm::ThrowInvalid("columns->num_", field, " is ", n);
  if (n > 0) RequireNotNull(names, (std::string("columns->") + field).c_str());
  std::vector<std::string> out;
  for (int32_t i = 0; i < n; ++i) {
    if (names[i] == nullptr && !null_entries)
      dlrm::ThrowInvalid("columns->", field, "[", i, "] is NULL");
    out.emplace_back(names[i] == nullptr ? "" : names[i]);
  }
  return out;
}

dlrm::ArrowColumns ColumnsFrom(const dlrm_arrow_columns* columns) {
  RequireNotNull(columns, "columns");
  if (columns->struct_size < sizeof(dlrm_arrow_columns))
    dlrm::ThrowInvalid("columns->struct_size is ", columns->struct_size,
                       "; set it to sizeof(dlrm_arrow_columns) = ", sizeof(dlrm_arrow_columns));
  dlrm::ArrowColumns out;
  if (columns->label != nullptr) out.label = columns->label;
  if (columns->label != nullptr && out.label.empty())
    dlrm::ThrowInvalid("columns->label is empty; give NULL for no labels");
  out.dense = Names(columns->dense, columns->num_dense, "dense", false);
  out.sparse = Names(columns->sparse, columns->num_sparse, "sparse", false);
  if (columns->weights != nullptr)
    out.weights = Names(columns->weights, columns->num_sparse, "weights", true);
  return out;
}

}  // namespace

extern "C" {

DLRM_API dlrm_status dlrm_arrow_batch_create(const struct ArrowSchema* schema,
                                             const struct ArrowArray* array,
                                             const dlrm_arrow_columns* columns,
                                             dlrm_arrow_batch** out) {
  return Guard([&] {
    RequireNotNull(out, "out");
    *out = nullptr;
    RequireNotNull(schema, "schema");
    RequireNotNull(array, "array");
    auto handle = std::make_unique<dlrm_arrow_batch>();
    handle->batch = dlrm::BatchFromArrow(*schema, *array, ColumnsFrom(columns));
    *out = handle.release();
  });
}

DLRM_API void dlrm_arrow_batch_destroy(dlrm_arrow_batch* batch) { delete batch; }

DLRM_API dlrm_status dlrm_arrow_batch_view(const dlrm_arrow_batch* batch, dlrm_batch* out) {
  return Guard([&] {
    RequireNotNull(batch, "batch");
    RequireNotNull(out, "out");
    if (out->struct_size < sizeof(dlrm_batch))
      dlrm::ThrowInvalid("out->struct_size is ", out->struct_size,
                         "; set it to sizeof(dlrm_batch) = ", sizeof(dlrm_batch));
    const dlrm::BatchView v = batch->batch.view();
    out->batch_size = v.batch_size;
    out->num_dense = v.num_dense;
    out->num_sparse = v.num_sparse;
    out->dense = v.dense;
    out->labels = v.labels;
    out->lengths = v.lengths;
    out->ids = v.ids;
    out->num_ids = v.num_ids;
    out->weights = v.weights;
  });
}

}  // extern "C"
