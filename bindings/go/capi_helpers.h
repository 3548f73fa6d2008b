// C helpers shared by the cgo preambles of capi.go and distributed.go (each preamble is
// its own translation unit, so they are static inline).
#ifndef DLRM_GO_CAPI_HELPERS_H_
#define DLRM_GO_CAPI_HELPERS_H_

#include <stdlib.h>
#include <string.h>

#include "dlrm/dlrm.h"

// dlrm_last_error() is thread-local and a goroutine may move to another thread between
// two cgo calls, so each helper reads the message in the same C call that failed and
// hands the caller a malloc'ed copy (NULL if out of memory) to free.
static inline dlrm_status go_check(dlrm_status status, char** msg) {
	if (status != DLRM_OK) {
		const char* text = dlrm_last_error();
		size_t n = strlen(text) + 1;
		char* copy = (char*)malloc(n);
		if (copy != NULL) memcpy(copy, text, n);
		*msg = copy;
	}
	return status;
}

// The batch arrives as separate arguments (pointers into Go slices) and is assembled on
// the C stack: a dlrm_batch in Go memory holding Go pointers would break cgo's rules.
#define GO_BATCH_PARAMS                                                            \
	int64_t batch_size, int32_t num_dense, int32_t num_sparse, const float* dense, \
	    const float* labels, const int32_t* lengths, const int64_t* ids,           \
	    int64_t num_ids, const float* weights

static inline dlrm_batch go_batch(GO_BATCH_PARAMS) {
	dlrm_batch b;
	memset(&b, 0, sizeof b);
	b.struct_size = sizeof(dlrm_batch);
	b.batch_size = batch_size;
	b.num_dense = num_dense;
	b.num_sparse = num_sparse;
	b.dense = dense;
	b.labels = labels;
	b.lengths = lengths;
	b.ids = ids;
	b.num_ids = num_ids;
	b.weights = weights;
	return b;
}

#define GO_BATCH \
	go_batch(batch_size, num_dense, num_sparse, dense, labels, lengths, ids, num_ids, weights)

#endif  // DLRM_GO_CAPI_HELPERS_H_
