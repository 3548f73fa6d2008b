package dlrm

// The library's log in Go: SetLogFunc sends every line libdlrm writes to a Go function.
//
// Contract: one process-wide sink (dlrm_set_log_callback), replaced by each SetLogFunc.
// The function runs on whichever library thread logs (a thread Go did not start, as a cgo
// callback), one message at a time: the library holds its log lock meanwhile, so it must
// be quick and must not call into libdlrm (Engine, Trainer, RunRole, SetLogFunc), which
// deadlocks. A panic in it is recovered and written to stderr, never unwinding into C.
// Ownership: the function is held through a runtime/cgo.Handle from the call that
// installed it until a later SetLogFunc returned (the library then never calls it again),
// when the handle is deleted. Errors: a level the library does not know is an *Error with
// code InvalidArgument naming min_level, and nothing changes.

/*
#include <stdint.h>

#include "capi_helpers.h"

// Exported by log_callback.go (declared here: _cgo_export.h does not exist yet when cgo
// reads this preamble).
extern void dlrmGoLog(uintptr_t user, int32_t level, char* file, int32_t line, char* message);

// A Go log function seen from C: user_data is the runtime/cgo.Handle of the LogFunc.
static void go_log(void* user_data, int32_t level, const char* file, int32_t line,
                   const char* message) {
	dlrmGoLog((uintptr_t)user_data, level, (char*)file, line, (char*)message);
}

// fn: 0 for stderr, else the cgo.Handle of a Go LogFunc.
static dlrm_status go_set_log_callback(uintptr_t fn, int32_t min_level, char** msg) {
	return go_check(dlrm_set_log_callback(fn != 0 ? go_log : NULL, (void*)fn, min_level), msg);
}
*/
import "C"

import (
	"fmt"
	"log"
	"runtime/cgo"
	"sync"
)

// LogLevel is the level of a library log message (DLRM_LOG_* in the C header).
type LogLevel int32

// Log levels; the values are those of the C ABI. As a threshold, a level passes the
// messages of that level and above; LogOff passes none.
const (
	LogDebug   LogLevel = 0
	LogInfo    LogLevel = 1
	LogWarning LogLevel = 2
	LogError   LogLevel = 3
	LogOff     LogLevel = 4
)

// These fail to compile if the Go levels drift from the header's.
var (
	_ = [1]struct{}{}[C.DLRM_LOG_DEBUG-LogDebug]
	_ = [1]struct{}{}[C.DLRM_LOG_INFO-LogInfo]
	_ = [1]struct{}{}[C.DLRM_LOG_WARNING-LogWarning]
	_ = [1]struct{}{}[C.DLRM_LOG_ERROR-LogError]
	_ = [1]struct{}{}[C.DLRM_LOG_OFF-LogOff]
)

var logLevelNames = [...]string{"DEBUG", "INFO", "WARNING", "ERROR", "OFF"}

// String returns the level's name as the library writes it, e.g. "INFO".
func (l LogLevel) String() string {
	if l >= 0 && int(l) < len(logLevelNames) {
		return logLevelNames[l]
	}
	return fmt.Sprintf("LogLevel(%d)", int32(l))
}

// LogFunc receives one library log message: its level (LogDebug .. LogError), the
// library source file and line that wrote it ("engine/ps/server.cc", 175) and the text,
// one line without a newline.
type LogFunc func(level LogLevel, file string, line int, msg string)

var (
	logMu     sync.Mutex // serializes SetLogFunc, and logHandle with the installed sink
	logHandle cgo.Handle // of the installed LogFunc; 0 for stderr
)

// SetLogFunc sends every library message of level >= minLevel to fn, or to stderr (the
// default, "[dlrm LEVEL file:line] message") when fn is nil; minLevel LogOff silences the
// library. It replaces the previous sink: once it returns, the previous fn is never
// called again. A minLevel the library does not know is an *Error matching
// ErrInvalidArgument, and nothing changes.
func SetLogFunc(fn LogFunc, minLevel LogLevel) error {
	if abiErr != nil {
		return abiErr
	}
	logMu.Lock()
	defer logMu.Unlock()
	var h cgo.Handle
	if fn != nil {
		h = cgo.NewHandle(fn)
	}
	var msg *C.char
	status := C.go_set_log_callback(C.uintptr_t(h), C.int32_t(minLevel), &msg)
	if err := statusError(status, msg); err != nil {
		if h != 0 {
			h.Delete() // the library kept the previous sink
		}
		return err
	}
	if logHandle != 0 {
		logHandle.Delete() // the library no longer calls it
	}
	logHandle = h
	return nil
}

// LoggerFunc returns a LogFunc that prints each message to logger (log.Default() when
// nil) as the library's stderr sink formats it: "[dlrm LEVEL file:line] message", after
// the logger's own prefix and flags.
func LoggerFunc(logger *log.Logger) LogFunc {
	if logger == nil {
		logger = log.Default()
	}
	return func(level LogLevel, file string, line int, msg string) {
		logger.Printf("[dlrm %s %s:%d] %s", level, file, line, msg)
	}
}
