package dlrm_test

import (
	"math"
	"reflect"
	"testing"

	"libdlrm.dev/dlrm"
	"libdlrm.dev/dlrm/internal/arrowtest"
)

// arrowRows is one batch of the shared model's samples as Arrow columns, kept in Go so
// that a test builds both the Arrow record and the Batch its conversion must give.
type arrowRows struct {
	x      []float32 // dense feature 0: float32
	y      []float64 // dense feature 1: float64, every value exact in float32
	yValid []bool    // nil: no nulls
	z      []int32   // dense feature 2: int32
	click  []int64   // label: int64 (also exported as the bool column "clicked")
	aOff   []int32   // sparse feature a: list<int64>, row 1 null with a stray id in its slot
	aIDs   []int64
	aValid []bool
	wOff   []int32 // a's weights: list<float32>
	wVals  []float32
	bOff   []int64 // sparse feature b: large_list<int32>
	bIDs   []int32
}

// arrowMapping names the columns of arrowRows' records for the shared model.
func arrowMapping() dlrm.ArrowColumns {
	return dlrm.ArrowColumns{Label: "click", Dense: []string{"x", "y", "z"},
		Sparse: []string{"a", "b"}, Weights: []string{"w", ""}}
}

// makeArrowRows gives testB deterministic samples: empty bags, a null list and ids
// spread over both tables (t0: 50 rows, t1: 20).
func makeArrowRows(salt int) *arrowRows {
	r := &arrowRows{aOff: []int32{0}, wOff: []int32{0}, bOff: []int64{0}}
	for i := 0; i < testB; i++ {
		r.x = append(r.x, float32((i*7+salt)%11)/11)
		r.y = append(r.y, float64(float32((i*3+salt)%13)/13))
		r.z = append(r.z, int32((i+salt)%5-2))
		r.click = append(r.click, int64((i+salt)%2))
		null := i == 1
		r.aValid = append(r.aValid, !null)
		if null {
			r.aIDs = append(r.aIDs, 999) // never read: a null list is an empty bag
		}
		for k := 0; !null && k < (i+salt)%3; k++ {
			r.aIDs = append(r.aIDs, int64((i*5+k*3+salt)%50))
			r.wVals = append(r.wVals, 0.5+0.25*float32(k+i%2))
		}
		r.aOff = append(r.aOff, int32(len(r.aIDs)))
		r.wOff = append(r.wOff, int32(len(r.wVals)))
		for k := 0; k < (i*2+salt)%3; k++ {
			r.bIDs = append(r.bIDs, int32((i*7+k+salt)%20))
		}
		r.bOff = append(r.bOff, int64(len(r.bIDs)))
	}
	return r
}

// record exports the rows as a struct array; the caller releases it.
func (r *arrowRows) record() *arrowtest.Record {
	clicked := make([]bool, len(r.click))
	for i, c := range r.click {
		clicked[i] = c == 1
	}
	return arrowtest.NewRecord(len(r.x),
		arrowtest.Float32("x", r.x, nil),
		arrowtest.Float64("y", r.y, r.yValid),
		arrowtest.Int32("z", r.z, nil),
		arrowtest.Int64("click", r.click, nil),
		arrowtest.Bool("clicked", clicked),
		arrowtest.List("a", r.aOff, arrowtest.Int64("item", r.aIDs, nil), r.aValid),
		arrowtest.List("w", r.wOff, arrowtest.Float32("item", r.wVals, nil), nil),
		arrowtest.LargeList("b", r.bOff, arrowtest.Int32("item", r.bIDs, nil), nil))
}

// batch is the Batch the rows convert to, built by hand (weights as arrowMapping's).
func (r *arrowRows) batch() *dlrm.Batch {
	b := &dlrm.Batch{BatchSize: testB, NumDense: testND, NumSparse: testNF}
	for i := range r.x {
		b.Dense = append(b.Dense, r.x[i], float32(r.y[i]), float32(r.z[i]))
		b.Labels = append(b.Labels, float32(r.click[i]))
	}
	for i := range r.x {
		if !r.aValid[i] {
			b.Lengths = append(b.Lengths, 0)
			continue
		}
		b.Lengths = append(b.Lengths, r.aOff[i+1]-r.aOff[i])
		b.IDs = append(b.IDs, r.aIDs[r.aOff[i]:r.aOff[i+1]]...)
	}
	b.Weights = append(b.Weights, r.wVals...)
	for i := range r.x {
		b.Lengths = append(b.Lengths, int32(r.bOff[i+1]-r.bOff[i]))
		for _, id := range r.bIDs[r.bOff[i]:r.bOff[i+1]] {
			b.IDs = append(b.IDs, int64(id))
			b.Weights = append(b.Weights, 1)
		}
	}
	return b
}

// fromArrow converts r's record with cols, checking that the record is left unreleased.
func fromArrow(t testing.TB, r *arrowRows, cols dlrm.ArrowColumns) (*dlrm.Batch, error) {
	t.Helper()
	rec := r.record()
	defer rec.Release()
	b, err := dlrm.BatchFromArrow(rec.Schema(), rec.Array(), cols)
	if rec.Released() {
		t.Errorf("BatchFromArrow released the borrowed record")
	}
	return b, err
}

// mustFromArrow is fromArrow failing the test on an error.
func mustFromArrow(t testing.TB, r *arrowRows, cols dlrm.ArrowColumns) *dlrm.Batch {
	t.Helper()
	b, err := fromArrow(t, r, cols)
	if err != nil {
		t.Fatalf("BatchFromArrow: %v", err)
	}
	return b
}

// sameBatch reports where got differs from want, bitwise for the float slices.
func sameBatch(t testing.TB, got, want *dlrm.Batch) {
	t.Helper()
	if got.BatchSize != want.BatchSize || got.NumDense != want.NumDense ||
		got.NumSparse != want.NumSparse {
		t.Errorf("sizes B=%d dense=%d sparse=%d, want %d %d %d", got.BatchSize, got.NumDense,
			got.NumSparse, want.BatchSize, want.NumDense, want.NumSparse)
	}
	floats := map[string][2][]float32{"Dense": {got.Dense, want.Dense},
		"Labels": {got.Labels, want.Labels}, "Weights": {got.Weights, want.Weights}}
	for name, f := range floats {
		if !sameBits(f[0], f[1]) || (f[0] == nil) != (f[1] == nil) {
			t.Errorf("%s = %v, want %v", name, f[0], f[1])
		}
	}
	if !reflect.DeepEqual(got.Lengths, want.Lengths) || !reflect.DeepEqual(got.IDs, want.IDs) {
		t.Errorf("Lengths, IDs = %v, %v; want %v, %v", got.Lengths, got.IDs, want.Lengths, want.IDs)
	}
}

func TestBatchFromArrowMatchesTheHandBuiltBatch(t *testing.T) {
	r := makeArrowRows(1)
	sameBatch(t, mustFromArrow(t, r, arrowMapping()), r.batch())

	boolLabel := arrowMapping()
	boolLabel.Label = "clicked"
	sameBatch(t, mustFromArrow(t, r, boolLabel), r.batch())

	unweighted := arrowMapping()
	unweighted.Weights = nil
	want := r.batch()
	want.Weights = nil
	sameBatch(t, mustFromArrow(t, r, unweighted), want)

	toPredict := arrowMapping()
	toPredict.Label = ""
	want = r.batch()
	want.Labels = nil
	sameBatch(t, mustFromArrow(t, r, toPredict), want)
}

// sameParameters fails the test unless a and b hold bitwise the same parameters.
func sameParameters(t testing.TB, a, b *dlrm.Engine) {
	t.Helper()
	names, err := a.ParameterNames()
	if err != nil || len(names) == 0 {
		t.Fatalf("ParameterNames: %v, %v", names, err)
	}
	for _, name := range names {
		pa, errA := a.ReadParameter(name)
		pb, errB := b.ReadParameter(name)
		if errA != nil || errB != nil {
			t.Fatalf("ReadParameter(%q): %v, %v", name, errA, errB)
		}
		if !sameBits(pa, pb) {
			t.Errorf("parameter %s differs bitwise", name)
		}
	}
}

func TestBatchFromArrowTrainsBitwiseAsTheHandBuiltBatch(t *testing.T) {
	fromArrowEngine, handBuilt := newTestEngine(t), newTestEngine(t)
	for step := 0; step < 6; step++ {
		r := makeArrowRows(step % 3)
		la, err := fromArrowEngine.TrainStep(mustFromArrow(t, r, arrowMapping()))
		if err != nil {
			t.Fatalf("step %d, Arrow batch: %v", step, err)
		}
		lb, err := handBuilt.TrainStep(r.batch())
		if err != nil {
			t.Fatalf("step %d, hand-built batch: %v", step, err)
		}
		if math.Float32bits(la) != math.Float32bits(lb) {
			t.Errorf("step %d: loss %v from the Arrow batch, %v from the hand-built one", step, la, lb)
		}
	}
	sameParameters(t, fromArrowEngine, handBuilt)

	cols := arrowMapping()
	cols.Label = ""
	r := makeArrowRows(5)
	want := r.batch()
	want.Labels = nil
	if got, want := predict(t, fromArrowEngine, mustFromArrow(t, r, cols)),
		predict(t, handBuilt, want); !sameBits(got, want) {
		t.Errorf("predictions %v from the Arrow batch, %v from the hand-built one", got, want)
	}
}

func TestBatchFromArrowErrorsNameTheColumn(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(r *arrowRows, c *dlrm.ArrowColumns)
		needles []string
	}{
		{"missing column", func(r *arrowRows, c *dlrm.ArrowColumns) { c.Dense[1] = "nope" },
			[]string{`"nope"`, "not a column"}},
		{"missing label", func(r *arrowRows, c *dlrm.ArrowColumns) { c.Label = "label" },
			[]string{`"label"`, "not a column"}},
		{"list as dense", func(r *arrowRows, c *dlrm.ArrowColumns) { c.Dense[0] = "a" },
			[]string{`"a"`, `"+l"`}},
		{"float as sparse", func(r *arrowRows, c *dlrm.ArrowColumns) { c.Sparse[0] = "x" },
			[]string{`"x"`, "expected a list"}},
		{"float ids", func(r *arrowRows, c *dlrm.ArrowColumns) { c.Sparse[1] = "w" },
			[]string{`"w"`, "ids are int64"}},
		{"null value", func(r *arrowRows, c *dlrm.ArrowColumns) {
			r.yValid = []bool{true, true, true, false, true, true, true, true}
		}, []string{`"y"`, "row 3 is null"}},
		{"weights of another feature", func(r *arrowRows, c *dlrm.ArrowColumns) {
			c.Weights = []string{"", "w"}
		}, []string{`"w"`, `weights but column "b"`}},
		{"weights count", func(r *arrowRows, c *dlrm.ArrowColumns) { c.Weights = []string{"w"} },
			[]string{"ArrowColumns.Weights names 1 columns", "ArrowColumns.Sparse 2"}},
		{"NUL in a name", func(r *arrowRows, c *dlrm.ArrowColumns) { c.Sparse[1] = "b\x00" },
			[]string{"ArrowColumns.Sparse[1]", "NUL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, cols := makeArrowRows(0), arrowMapping()
			c.mutate(r, &cols)
			b, err := fromArrow(t, r, cols)
			wantError(t, err, dlrm.ErrInvalidArgument, c.needles...)
			if b != nil {
				t.Errorf("got a batch with the error: %+v", b)
			}
		})
	}
	t.Run("nil pointers", func(t *testing.T) {
		rec := makeArrowRows(0).record()
		defer rec.Release()
		_, err := dlrm.BatchFromArrow(nil, rec.Array(), arrowMapping())
		wantError(t, err, dlrm.ErrInvalidArgument, "schema is nil")
		_, err = dlrm.BatchFromArrow(rec.Schema(), nil, arrowMapping())
		wantError(t, err, dlrm.ErrInvalidArgument, "array is nil")
	})
}

func TestFailedArrowBatchesLeaveTheEngineUnchanged(t *testing.T) {
	e, twin := newTestEngine(t), newTestEngine(t)
	for step := 0; step < 2; step++ {
		b := mustFromArrow(t, makeArrowRows(step), arrowMapping())
		if _, err := e.TrainStep(b); err != nil {
			t.Fatal(err)
		}
		if _, err := twin.TrainStep(b); err != nil {
			t.Fatal(err)
		}
	}
	// A conversion that fails, then a batch that converts but holds ids outside t0:
	// values are checked when the batch is used.
	bad, cols := makeArrowRows(2), arrowMapping()
	cols.Dense[2] = "missing"
	if _, err := fromArrow(t, bad, cols); err == nil {
		t.Fatal("BatchFromArrow accepted a missing column")
	}
	for i := range bad.aIDs {
		bad.aIDs[i] = 50
	}
	outOfRange := mustFromArrow(t, bad, arrowMapping())
	_, err := e.TrainStep(outOfRange)
	wantError(t, err, dlrm.ErrOutOfRange, "batch.ids[0]")
	_, err = e.Predict(outOfRange)
	wantError(t, err, dlrm.ErrOutOfRange, "batch.ids[0]")

	if n, err := e.Step(); err != nil || n != 2 {
		t.Errorf("Step() = %d, %v; want 2", n, err)
	}
	sameParameters(t, e, twin)
	next := mustFromArrow(t, makeArrowRows(3), arrowMapping())
	la, errA := e.TrainStep(next)
	lb, errB := twin.TrainStep(next)
	if errA != nil || errB != nil || math.Float32bits(la) != math.Float32bits(lb) {
		t.Errorf("the next step's losses %v, %v (errors %v, %v) differ", la, lb, errA, errB)
	}
}
