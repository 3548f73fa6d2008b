package dlrm_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"libdlrm.dev/dlrm"
	"libdlrm.dev/dlrm/internal/testmodel"
)

// testConfig is the small model shared with the C ABI test and the Python and Java suites.
var testConfig = testmodel.Config()

const (
	testB  = 8
	testND = 3
	testNF = 2
)

// makeBatch builds the deterministic batch of the C test's make_batch (with labels).
func makeBatch(salt int) *dlrm.Batch {
	b := &dlrm.Batch{
		BatchSize: testB,
		NumDense:  testND,
		NumSparse: testNF,
		Dense:     make([]float32, testB*testND),
		Labels:    make([]float32, testB),
		Lengths:   make([]int32, testNF*testB),
	}
	for i := range b.Dense {
		b.Dense[i] = float32((i*7+salt)%11) / 11
	}
	for i := range b.Labels {
		b.Labels[i] = float32((i + salt) % 2)
	}
	for i := range b.Lengths {
		n := (i + salt) % 3 // 0, 1 or 2 ids: empty bags included
		b.Lengths[i] = int32(n)
		for k := 0; k < n; k++ {
			b.IDs = append(b.IDs, int64((i*5+k*3+salt)%20))
		}
	}
	return b
}

// newTestEngine creates an engine from testConfig, closed when the test ends.
func newTestEngine(t testing.TB) *dlrm.Engine {
	t.Helper()
	e, err := dlrm.NewEngine(testConfig)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// train takes n steps over the salts 0, 1, 2, ... and returns the last loss.
func train(t testing.TB, e *dlrm.Engine, n int) float32 {
	t.Helper()
	var loss float32
	for i := 0; i < n; i++ {
		var err error
		if loss, err = e.TrainStep(makeBatch(i % 3)); err != nil {
			t.Fatalf("TrainStep %d: %v", i, err)
		}
	}
	return loss
}

// predict fails the test if Predict does.
func predict(t testing.TB, e interface {
	Predict(*dlrm.Batch) ([]float32, error)
}, b *dlrm.Batch) []float32 {
	t.Helper()
	p, err := e.Predict(b)
	if err != nil {
		t.Fatalf("Predict: %v", err)
	}
	return p
}

// sameBits reports whether a and b are bitwise equal.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// wantError checks that err is a *dlrm.Error matching sentinel whose message contains
// every needle.
func wantError(t testing.TB, err error, sentinel *dlrm.Error, needles ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel.Code)
	}
	var de *dlrm.Error
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *dlrm.Error", err, err)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("error %q has code %v, want %v", err, de.Code, sentinel.Code)
	}
	for _, n := range needles {
		if !strings.Contains(de.Msg, n) {
			t.Errorf("message %q lacks %q", de.Msg, n)
		}
	}
}
