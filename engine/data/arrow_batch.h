// A batch from Arrow columns (the C Data Interface, arrow_c_data.h): a struct array whose
// named children are the dense features (float32/float64/int32/int64 columns), the label
// (those or bool) and the sparse features (list<int64|int32> or large_list of them, each
// optionally with a list<float32|float64> of per-id weights with the same lengths).
// Rows become samples; the result is the engine's layout (dense row-major, lengths and
// ids feature-major), so it is a copy: dlrm_batch keeps all features' ids in one array.
// A null list is an empty bag; any other null is an error.
//
// Ownership: the schema and array are borrowed (never released); the result owns its
// storage. Threading: none of its own; the caller's arrays must not change meanwhile.
// Errors: kInvalidArgument naming the column (and the row where one is at fault): a
// missing column, an unsupported type, a null value, a malformed array (buffers, offsets,
// children out of the spec), weights whose lengths differ from their ids'.
#pragma once

#include <string>
#include <vector>

#include "engine/data/arrow_c_data.h"
#include "engine/data/batch.h"

namespace dlrm {

// Which column is which, by name.
struct ArrowColumns {
  std::string label;                 // empty: no labels (a batch to predict)
  std::vector<std::string> dense;    // the model's dense features, in order
  std::vector<std::string> sparse;   // the model's sparse features, in order
  std::vector<std::string> weights;  // empty, or one per sparse feature ("" = unweighted)
};

OwnedBatch BatchFromArrow(const ArrowSchema& schema, const ArrowArray& array,
                          const ArrowColumns& columns);

}  // namespace dlrm
