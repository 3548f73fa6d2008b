package dlrm

/*
#include <stdlib.h>

#include "dlrm/dlrm.h"
*/
import "C"

import "unsafe"

// copyBatches copies batches (already validated) into one C allocation and returns a C
// array of dlrm_batch pointing into it, with a function that frees both.
//
// Several batches cannot be passed zero-copy: the array of dlrm_batch must hold
// pointers to the data, and without runtime.Pinner (Go 1.21) neither Go memory nor C
// memory may hold Go pointers across a call. Evaluate is not a hot path; Predict and
// TrainStep stay zero-copy.
func copyBatches(batches []*Batch) (*C.dlrm_batch, func(), error) {
	// int64 ids first so that every region stays aligned; then 4-byte values.
	var n8, n4 int
	for _, b := range batches {
		n8 += len(b.IDs)
		n4 += len(b.Dense) + len(b.Labels) + len(b.Lengths) + len(b.Weights)
	}
	data := C.malloc(C.size_t(8*n8 + 4*n4 + 8))
	array := C.malloc(C.size_t(len(batches)) * C.sizeof_dlrm_batch)
	free := func() {
		C.free(data)
		C.free(array)
	}
	if data == nil || array == nil {
		free()
		return nil, nil, &Error{Code: ResourceExhausted,
			Msg: "out of memory copying the batches for Evaluate"}
	}
	a := arena{base: data}
	out := unsafe.Slice((*C.dlrm_batch)(array), len(batches))
	for i, b := range batches {
		out[i] = C.dlrm_batch{
			struct_size: C.sizeof_dlrm_batch,
			batch_size:  C.int64_t(b.BatchSize),
			num_dense:   C.int32_t(b.NumDense),
			num_sparse:  C.int32_t(b.NumSparse),
			num_ids:     C.int64_t(len(b.IDs)),
			ids:         (*C.int64_t)(copyInto(&a, b.IDs)),
		}
	}
	for i, b := range batches {
		out[i].dense = (*C.float)(copyInto(&a, b.Dense))
		out[i].labels = (*C.float)(copyInto(&a, b.Labels))
		out[i].lengths = (*C.int32_t)(copyInto(&a, b.Lengths))
		out[i].weights = (*C.float)(copyInto(&a, b.Weights))
	}
	return (*C.dlrm_batch)(array), free, nil
}

// arena hands out consecutive regions of one C allocation.
type arena struct {
	base unsafe.Pointer
	off  uintptr
}

// copyInto copies s into the next region of a and returns its address, or nil if s is
// empty (so that a nil slice stays NULL).
func copyInto[T float32 | int32 | int64](a *arena, s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	p := unsafe.Add(a.base, a.off)
	copy(unsafe.Slice((*T)(p), len(s)), s)
	a.off += uintptr(len(s)) * unsafe.Sizeof(s[0])
	return p
}
