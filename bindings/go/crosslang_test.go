package dlrm_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"libdlrm.dev/dlrm"
)

// TestCrossLanguage predicts the batch exported by the Python suite into
// $DLRM_CROSSLANG_DIR with the exported checkpoint and requires the Python predictions
// bitwise. It writes its own output to go.f32 there.
//
// Files (raw little-endian): model.ckpt; batch_meta.txt, one line "batch_size num_dense
// num_sparse num_ids"; dense.f32 [B*Nd]; lengths.i32 [F*B]; ids.i64 [num_ids];
// weights.f32 [num_ids]; expected.f32 [B].
func TestCrossLanguage(t *testing.T) {
	dir := os.Getenv("DLRM_CROSSLANG_DIR")
	if dir == "" {
		t.Skip("DLRM_CROSSLANG_DIR is not set (ctest sets it after python_crosslang_export)")
	}
	meta, err := os.ReadFile(filepath.Join(dir, "batch_meta.txt"))
	if err != nil {
		t.Fatalf("no cross-language fixture (the Python suite's python_crosslang_export test writes it): %v", err)
	}
	var b dlrm.Batch
	var numIDs int
	if _, err := fmt.Sscan(string(meta), &b.BatchSize, &b.NumDense, &b.NumSparse, &numIDs); err != nil {
		t.Fatalf("batch_meta.txt %q: %v", meta, err)
	}
	b.Dense = make([]float32, b.BatchSize*b.NumDense)
	b.Lengths = make([]int32, b.NumSparse*b.BatchSize)
	b.IDs = make([]int64, numIDs)
	b.Weights = make([]float32, numIDs)
	expected := make([]float32, b.BatchSize)
	readRaw(t, dir, "dense.f32", b.Dense)
	readRaw(t, dir, "lengths.i32", b.Lengths)
	readRaw(t, dir, "ids.i64", b.IDs)
	readRaw(t, dir, "weights.f32", b.Weights)
	readRaw(t, dir, "expected.f32", expected)

	p, err := dlrm.OpenPredictor(filepath.Join(dir, "model.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, err := p.Predict(&b)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := binary.Write(&out, binary.LittleEndian, got); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.f32"), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range expected {
		if math.Float32bits(got[i]) != math.Float32bits(expected[i]) {
			t.Errorf("sample %d: Go predicts %v (%#08x), Python %v (%#08x)", i, got[i],
				math.Float32bits(got[i]), expected[i], math.Float32bits(expected[i]))
		}
	}
}

// readRaw fills data from the little-endian file dir/name, which must be its exact size.
func readRaw(t *testing.T, dir, name string, data interface{}) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if want := binary.Size(data); len(raw) != want {
		t.Fatalf("%s has %d bytes, want %d", name, len(raw), want)
	}
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, data); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}
