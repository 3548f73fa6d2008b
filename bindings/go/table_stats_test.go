package dlrm_test

import (
	"strings"
	"testing"

	"libdlrm.dev/dlrm"
)

const (
	fixedT0   = "tables { name: 't0' num_rows: 50 dim: 4 }"
	dynamicT0 = "tables { name: 't0' num_rows: 6 dim: 4 kind: DYNAMIC dynamic { eviction: LFU } }"
	// Raw ids of feature 'a': (k + 1) times this, spread over (and wrapping) the int64 range.
	idSpread int64 = 0x9E3779B97F4A7C1
)

// newDynamicEngine creates an engine from testConfig with table t0 made DYNAMIC with 6
// rows (LFU), as in the C test, closed when the test ends.
func newDynamicEngine(t testing.TB) *dlrm.Engine {
	t.Helper()
	if !strings.Contains(testConfig, fixedT0) {
		t.Fatalf("testConfig lacks %q", fixedT0)
	}
	e, err := dlrm.NewEngine(strings.Replace(testConfig, fixedT0, dynamicT0, 1))
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// rawIDBatch is makeBatch(salt) with feature a's ids 0..19 turned into raw ids.
func rawIDBatch(salt int) *dlrm.Batch {
	b := makeBatch(salt)
	first := 0
	for _, n := range b.Lengths[:testB] {
		first += int(n)
	}
	for i := range b.IDs[:first] {
		b.IDs[i] = (b.IDs[i] + 1) * idSpread
	}
	return b
}

func tableStats(t testing.TB, e *dlrm.Engine, table string) dlrm.TableStats {
	t.Helper()
	s, err := e.TableStats(table)
	if err != nil {
		t.Fatalf("TableStats(%q): %v", table, err)
	}
	return s
}

func TestTableStatsDynamic(t *testing.T) {
	e := newDynamicEngine(t)
	for step := 0; step < 4; step++ {
		if _, err := e.TrainStep(rawIDBatch(step)); err != nil {
			t.Fatalf("TrainStep %d: %v", step, err)
		}
	}
	s := tableStats(t, e, "t0")
	if !s.Dynamic || s.Capacity != 6 || s.Size <= 0 || s.Size > 6 {
		t.Errorf("t0: %+v; want Dynamic, Capacity 6, 0 < Size <= 6", s)
	}
	if s.Admitted <= 6 || s.Evicted <= 0 || s.Admitted-s.Evicted != s.Size {
		t.Errorf("t0: %+v; want Admitted > 6, Evicted > 0, Admitted - Evicted == Size", s)
	}
	if s.Lookups <= 0 || s.Hits < 0 || s.Hits > s.Lookups || s.Rejected < 0 || s.MemoryBytes <= 6*4*4 {
		t.Errorf("t0: %+v; want 0 <= Hits <= Lookups, Lookups > 0, MemoryBytes > 96", s)
	}
	if got, want := s.HitRate(), float64(s.Hits)/float64(s.Lookups); got != want {
		t.Errorf("HitRate() = %v, want %v", got, want)
	}

	predict(t, e, rawIDBatch(1)) // prediction admits nothing
	after := tableStats(t, e, "t0")
	if after.Lookups != s.Lookups || after.Admitted != s.Admitted || after.Size != s.Size {
		t.Errorf("Predict changed t0's stats from %+v to %+v", s, after)
	}
}

func TestTableStatsFixed(t *testing.T) {
	e := newDynamicEngine(t)
	if _, err := e.TrainStep(rawIDBatch(0)); err != nil {
		t.Fatal(err)
	}
	s := tableStats(t, e, "t1")
	if s.Dynamic || s.Capacity != 20 || s.Size != 20 || s.Lookups != 0 || s.MemoryBytes <= 0 {
		t.Errorf("t1: %+v; want a FIXED table of 20 rows that counts nothing", s)
	}
	if s.HitRate() != 0 {
		t.Errorf("HitRate() = %v before any lookup, want 0", s.HitRate())
	}
}

func TestTableStatsErrors(t *testing.T) {
	e := newDynamicEngine(t)
	_, err := e.TableStats("nope")
	wantError(t, err, dlrm.ErrNotFound, "nope")
	_, err = e.TableStats("t0\x00")
	wantError(t, err, dlrm.ErrInvalidArgument, "NUL")
	e.Close()
	_, err = e.TableStats("t0")
	wantError(t, err, dlrm.ErrClosed)
}
