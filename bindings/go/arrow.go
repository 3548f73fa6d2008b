package dlrm

/*
#include <stdlib.h>
#include <string.h>

#include "capi_helpers.h"

// go_arrow_batch converts the struct array into a new handle and points *view at its
// arrays. On failure *out is NULL: no handle is left to destroy.
static dlrm_status go_arrow_batch(const struct ArrowSchema* schema,
                                  const struct ArrowArray* array,
                                  const dlrm_arrow_columns* columns, dlrm_arrow_batch** out,
                                  dlrm_batch* view, char** msg) {
	dlrm_status status = go_check(dlrm_arrow_batch_create(schema, array, columns, out), msg);
	if (status != DLRM_OK) return status;
	memset(view, 0, sizeof *view);
	view->struct_size = sizeof *view;
	status = go_check(dlrm_arrow_batch_view(*out, view), msg);
	if (status != DLRM_OK) {
		dlrm_arrow_batch_destroy(*out);
		*out = NULL;
	}
	return status;
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// ArrowColumns says which columns of an Arrow record batch are which, by name.
type ArrowColumns struct {
	// Label names the label column (float32, float64, int32, int64 or bool); "" for a
	// batch to predict, whose Labels are then nil.
	Label string
	// Dense names the columns of the model's dense features, in the model's order
	// (float32, float64, int32 or int64; nulls are refused).
	Dense []string
	// Sparse names the columns of the model's sparse features, in the model's order:
	// list<int64|int32> or large_list of them, a row's ids (a null list is an empty bag).
	Sparse []string
	// Weights is nil (every id weighs 1) or names one column per entry of Sparse, ""
	// for a feature without weights: list<float32|float64> with the same lengths as its
	// sparse column's lists. Unweighted features' ids then weigh 1.
	Weights []string
}

// BatchFromArrow converts an Arrow record batch, exported through the Arrow C Data
// Interface as a struct array, into a Batch: one sample per row, the columns picked by
// cols. schema and array point to the C structs ArrowSchema and ArrowArray, as arrow-go's
// cdata package exports them:
//
//	var arr cdata.CArrowArray
//	var schema cdata.CArrowSchema
//	cdata.ExportArrowRecordBatch(rec, &arr, &schema)
//	batch, err := dlrm.BatchFromArrow(unsafe.Pointer(&schema), unsafe.Pointer(&arr), cols)
//
// Both are borrowed for the call only: neither is released nor kept, so the caller
// releases them as before, and their arrays must not change during the call. The
// result is an ordinary Batch holding a copy of the values in the engine's layout (dense
// row-major, lengths and ids feature-major), usable by every Engine, Predictor and
// Trainer call; no native memory is left behind.
//
// The layout is checked here (an error matching ErrInvalidArgument whose message names
// the column, and the row where one is at fault: a missing column, an unsupported type,
// a null value, offsets or buffers out of the spec, weights whose lengths differ from
// their ids'); the values (ids in their tables, NaN, labels in [0, 1]) are checked when
// the batch is used, as any batch's are. Nil pointers and Weights of another length
// than Sparse are refused the same way.
func BatchFromArrow(schema, array unsafe.Pointer, cols ArrowColumns) (*Batch, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	if schema == nil {
		return nil, invalidf("BatchFromArrow: schema is nil; pass a *ArrowSchema")
	}
	if array == nil {
		return nil, invalidf("BatchFromArrow: array is nil; pass a *ArrowArray")
	}
	var a cAllocs
	defer a.free()
	ccols, err := a.columns(cols)
	if err != nil {
		return nil, err
	}
	var handle *C.dlrm_arrow_batch
	var view C.dlrm_batch
	var msg *C.char
	status := C.go_arrow_batch((*C.struct_ArrowSchema)(schema), (*C.struct_ArrowArray)(array),
		ccols, &handle, &view, &msg)
	if err := statusError(status, msg); err != nil {
		return nil, err
	}
	defer C.dlrm_arrow_batch_destroy(handle)
	return batchFromView(&view), nil
}

// cAllocs tracks C allocations made for one call; free releases them all.
type cAllocs []unsafe.Pointer

func (a *cAllocs) malloc(n uintptr) unsafe.Pointer {
	p := C.malloc(C.size_t(n))
	*a = append(*a, p)
	return p
}

func (a *cAllocs) free() {
	for _, p := range *a {
		C.free(p)
	}
	*a = nil
}

// columns converts cols for C: the struct, its arrays and strings all in C memory, so
// that no Go pointer reaches the C side.
func (a *cAllocs) columns(cols ArrowColumns) (*C.dlrm_arrow_columns, error) {
	if cols.Weights != nil && len(cols.Weights) != len(cols.Sparse) {
		return nil, invalidf("ArrowColumns.Weights names %d columns but ArrowColumns.Sparse %d "+
			"(use nil for no weights, \"\" for an unweighted feature)",
			len(cols.Weights), len(cols.Sparse))
	}
	if len(cols.Dense) > math.MaxInt32 || len(cols.Sparse) > math.MaxInt32 {
		return nil, invalidf("ArrowColumns names %d dense and %d sparse columns; at most %d each",
			len(cols.Dense), len(cols.Sparse), math.MaxInt32)
	}
	c := (*C.dlrm_arrow_columns)(a.malloc(C.sizeof_dlrm_arrow_columns))
	*c = C.dlrm_arrow_columns{struct_size: C.sizeof_dlrm_arrow_columns,
		num_dense: C.int32_t(len(cols.Dense)), num_sparse: C.int32_t(len(cols.Sparse))}
	var err error
	if cols.Label != "" {
		if c.label, err = a.str(cols.Label, "ArrowColumns.Label"); err != nil {
			return nil, err
		}
	}
	if c.dense, err = a.names(cols.Dense, "Dense", false); err != nil {
		return nil, err
	}
	if c.sparse, err = a.names(cols.Sparse, "Sparse", false); err != nil {
		return nil, err
	}
	if c.weights, err = a.names(cols.Weights, "Weights", true); err != nil {
		return nil, err
	}
	return c, nil
}

// str copies s into C memory, refusing embedded NUL bytes; what names it in messages.
func (a *cAllocs) str(s, what string) (*C.char, error) {
	p, err := cString(s, what)
	if err != nil {
		return nil, err
	}
	*a = append(*a, unsafe.Pointer(p))
	return p, nil
}

// names copies names into a C array of C strings (NULL for an empty slice); with
// emptyIsNull an entry "" becomes a NULL entry.
func (a *cAllocs) names(names []string, field string, emptyIsNull bool) (**C.char, error) {
	if len(names) == 0 {
		return nil, nil
	}
	array := (**C.char)(a.malloc(uintptr(len(names)) * unsafe.Sizeof((*C.char)(nil))))
	out := unsafe.Slice(array, len(names))
	for i, name := range names {
		out[i] = nil
		if name == "" && emptyIsNull {
			continue
		}
		p, err := a.str(name, fmt.Sprintf("ArrowColumns.%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return array, nil
}

// batchFromView copies the arrays v points at into a new Batch (Labels and Weights nil
// where v's are NULL).
func batchFromView(v *C.dlrm_batch) *Batch {
	n := int(v.batch_size)
	b := &Batch{BatchSize: n, NumDense: int(v.num_dense), NumSparse: int(v.num_sparse)}
	b.Dense = copyOut[float32](unsafe.Pointer(v.dense), n*b.NumDense)
	b.Lengths = copyOut[int32](unsafe.Pointer(v.lengths), n*b.NumSparse)
	b.IDs = copyOut[int64](unsafe.Pointer(v.ids), int(v.num_ids))
	if v.labels != nil {
		b.Labels = copyOut[float32](unsafe.Pointer(v.labels), n)
	}
	if v.weights != nil {
		b.Weights = copyOut[float32](unsafe.Pointer(v.weights), int(v.num_ids))
	}
	return b
}

// copyOut copies n values of C memory at p into a new Go slice (empty, not nil, for 0).
func copyOut[T float32 | int32 | int64](p unsafe.Pointer, n int) []T {
	out := make([]T, n)
	if n > 0 {
		copy(out, unsafe.Slice((*T)(p), n))
	}
	return out
}
