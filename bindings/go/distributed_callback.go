package dlrm

// The Go side of a Trainer's AllGather. A file with an //export may only declare in its
// C preamble; the C trampoline that calls it is in distributed.go.

/*
#include <stdint.h>

#include "dlrm/dlrm.h"
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// dlrmGoAllGather is the trainer's dlrm_allgather_fn: it hands this trainer's bytes to the
// gatherer's function and every rank's bytes to dlrm_gather_put. Any failure, a panic
// included, is recorded for the failed call's error and returned as 1: it never unwinds
// into libdlrm.
//
//export dlrmGoAllGather
func dlrmGoAllGather(user C.uintptr_t, data unsafe.Pointer, numBytes C.int64_t,
	result *C.dlrm_gather) (rc C.int32_t) {
	var g *gatherer
	defer func() {
		if p := recover(); p != nil {
			if g != nil {
				g.fail(fmt.Errorf("all-gather panicked: %v", p))
			}
			rc = 1
		}
	}()
	g = cgo.Handle(user).Value().(*gatherer)
	mine := make([]byte, int(numBytes))
	if numBytes > 0 {
		copy(mine, unsafe.Slice((*byte)(data), int(numBytes)))
	}
	parts, err := g.fn(mine)
	if err != nil {
		g.fail(fmt.Errorf("all-gather: %w", err))
		return 1
	}
	for rank, part := range parts {
		var p unsafe.Pointer
		if len(part) > 0 {
			p = unsafe.Pointer(&part[0])
		}
		// A callback keeps its thread, so dlrm_last_error is the message of this call.
		if C.dlrm_gather_put(result, C.int32_t(rank), p, C.int64_t(len(part))) != C.DLRM_OK {
			g.fail(fmt.Errorf("all-gather returned %d parts: %s", len(parts),
				C.GoString(C.dlrm_last_error())))
			return 1
		}
	}
	return 0
}
