package dlrm

// The Go side of the library's log sink (see log.go, SetLogFunc). A file with an //export
// may only declare in its C preamble; the C trampoline that calls it is in log.go.

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/cgo"
)

// dlrmGoLog is the dlrm_log_fn of a Go LogFunc: it hands the message to the function the
// handle refers to. A panic is recovered and written to stderr: it never unwinds into
// libdlrm, which holds its log lock during the call.
//
//export dlrmGoLog
func dlrmGoLog(user C.uintptr_t, level C.int32_t, file *C.char, line C.int32_t, msg *C.char) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "dlrm: the log function panicked: %v\n", p)
		}
	}()
	fn := cgo.Handle(user).Value().(LogFunc)
	fn(LogLevel(level), C.GoString(file), int(line), C.GoString(msg))
}
