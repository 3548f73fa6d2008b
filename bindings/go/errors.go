package dlrm

import "fmt"

// Code is a libdlrm status code (dlrm_status in the C header).
type Code int32

// Status codes; the values are those of the C ABI.
const (
	OK                 Code = 0
	InvalidArgument    Code = 1  // a bad argument, batch field or config field
	OutOfRange         Code = 2  // e.g. an id outside its table's rows
	IO                 Code = 3  // a file could not be read or written
	Network            Code = 4  // a network failure
	Timeout            Code = 5  // a deadline passed
	Cancelled          Code = 6  // the operation was cancelled
	Internal           Code = 7  // a bug in libdlrm
	FailedPrecondition Code = 8  // e.g. a checkpoint for another model, a closed engine
	NotFound           Code = 9  // e.g. no parameter of that name
	DataLoss           Code = 10 // a corrupted or truncated checkpoint
	ResourceExhausted  Code = 11 // out of memory
)

var codeNames = [...]string{
	OK:                 "OK",
	InvalidArgument:    "INVALID_ARGUMENT",
	OutOfRange:         "OUT_OF_RANGE",
	IO:                 "IO",
	Network:            "NETWORK",
	Timeout:            "TIMEOUT",
	Cancelled:          "CANCELLED",
	Internal:           "INTERNAL",
	FailedPrecondition: "FAILED_PRECONDITION",
	NotFound:           "NOT_FOUND",
	DataLoss:           "DATA_LOSS",
	ResourceExhausted:  "RESOURCE_EXHAUSTED",
}

// String returns the code's stable name as the C ABI spells it, e.g. "INVALID_ARGUMENT".
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("UNKNOWN(%d)", int32(c))
}

// Error is a failed libdlrm call: the status code and the engine's message, which names
// the argument or field that was wrong. Errors detected by the binding itself (slice
// lengths, closed handles) have the same form.
type Error struct {
	Code Code
	Msg  string

	cause error // a Go error behind the failure (a Trainer's AllGather), or nil
}

// Error formats the error as "dlrm: CODE: message".
func (e *Error) Error() string {
	if e.Msg == "" {
		return "dlrm: " + e.Code.String()
	}
	return "dlrm: " + e.Code.String() + ": " + e.Msg
}

// Is reports whether target is an *Error with the same Code and, when target's Msg is
// not empty, the same Msg. So errors.Is(err, ErrOutOfRange) matches every out-of-range
// failure, and errors.Is(err, ErrClosed) only the use of a closed handle.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t == nil || e == nil {
		return false
	}
	return t.Code == e.Code && (t.Msg == "" || t.Msg == e.Msg)
}

// Unwrap returns the Go error behind the failure, if any: the error (or panic) of a
// Trainer's AllGather that failed the call. Msg already includes its text.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.cause
}

// Sentinel errors for errors.Is, one per status code.
var (
	ErrInvalidArgument    = &Error{Code: InvalidArgument}
	ErrOutOfRange         = &Error{Code: OutOfRange}
	ErrIO                 = &Error{Code: IO}
	ErrNetwork            = &Error{Code: Network}
	ErrTimeout            = &Error{Code: Timeout}
	ErrCancelled          = &Error{Code: Cancelled}
	ErrInternal           = &Error{Code: Internal}
	ErrFailedPrecondition = &Error{Code: FailedPrecondition}
	ErrNotFound           = &Error{Code: NotFound}
	ErrDataLoss           = &Error{Code: DataLoss}
	ErrResourceExhausted  = &Error{Code: ResourceExhausted}
)

// ErrClosed is returned by every method of an Engine, Predictor or Trainer after Close.
// It also matches ErrFailedPrecondition.
var ErrClosed = &Error{Code: FailedPrecondition, Msg: "engine is closed"}

// invalidf returns an InvalidArgument *Error detected on the Go side.
func invalidf(format string, args ...interface{}) error {
	return &Error{Code: InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}
