package dlrm_test

import (
	"errors"
	"fmt"
	"testing"

	"libdlrm.dev/dlrm"
)

func TestErrorIsAndAs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &dlrm.Error{Code: dlrm.OutOfRange, Msg: "batch.ids[0] = 50"})
	if !errors.Is(err, dlrm.ErrOutOfRange) {
		t.Error("errors.Is(err, ErrOutOfRange) = false")
	}
	if errors.Is(err, dlrm.ErrInvalidArgument) {
		t.Error("errors.Is(err, ErrInvalidArgument) = true")
	}
	var de *dlrm.Error
	if !errors.As(err, &de) || de.Code != dlrm.OutOfRange || de.Msg != "batch.ids[0] = 50" {
		t.Errorf("errors.As gave %+v", de)
	}
	if got, want := de.Error(), "dlrm: OUT_OF_RANGE: batch.ids[0] = 50"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	closed := &dlrm.Error{Code: dlrm.FailedPrecondition, Msg: dlrm.ErrClosed.Msg}
	if !errors.Is(closed, dlrm.ErrClosed) || !errors.Is(closed, dlrm.ErrFailedPrecondition) {
		t.Error("a closed error matches neither ErrClosed nor ErrFailedPrecondition")
	}
	if errors.Is(&dlrm.Error{Code: dlrm.FailedPrecondition, Msg: "other"}, dlrm.ErrClosed) {
		t.Error("another FailedPrecondition error matches ErrClosed")
	}
}

func TestCodeString(t *testing.T) {
	for code, want := range map[dlrm.Code]string{
		dlrm.OK:                "OK",
		dlrm.InvalidArgument:   "INVALID_ARGUMENT",
		dlrm.IO:                "IO",
		dlrm.DataLoss:          "DATA_LOSS",
		dlrm.ResourceExhausted: "RESOURCE_EXHAUSTED",
		dlrm.Code(99):          "UNKNOWN(99)",
	} {
		if got := code.String(); got != want {
			t.Errorf("Code(%d).String() = %q, want %q", int32(code), got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	if dlrm.Version() == "" {
		t.Error("Version() is empty")
	}
	if dlrm.ABIVersion != 1 {
		t.Errorf("ABIVersion = %d", dlrm.ABIVersion)
	}
}
