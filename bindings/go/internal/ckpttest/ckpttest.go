// Package ckpttest writes checkpoints of the shared small model (internal/testmodel) for
// the serving tests, and publishes them the way a trainer does: written under a temporary
// name, then renamed over the served path.
package ckpttest

import (
	"os"
	"path/filepath"
	"testing"

	"libdlrm.dev/dlrm"
)

// Batch returns a batch of 4 samples for the small model, with labels.
func Batch() *dlrm.Batch {
	return &dlrm.Batch{
		BatchSize: 4,
		NumDense:  3,
		Dense:     []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2},
		NumSparse: 2,
		Lengths:   []int32{1, 0, 2, 1, 1, 1, 0, 3},
		IDs:       []int64{3, 7, 49, 0, 5, 19, 1, 2, 3},
		Labels:    []float32{1, 0, 0, 1},
	}
}

// Save creates an engine from config, trains it for steps steps on Batch and saves it to
// path; each number of steps gives a different model.
func Save(tb testing.TB, config string, steps int, path string) {
	tb.Helper()
	e, err := dlrm.NewEngine(config)
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Close()
	for i := 0; i < steps; i++ {
		if _, err := e.TrainStep(Batch()); err != nil {
			tb.Fatal(err)
		}
	}
	if err := e.Save(path); err != nil {
		tb.Fatal(err)
	}
}

// Publish writes data to a temporary file next to dst and renames it over dst, as a
// trainer replaces the checkpoint a server reads: readers see the old file or the new
// one, never a part.
func Publish(tb testing.TB, data []byte, dst string) {
	tb.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".new-*")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		tb.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		tb.Fatal(err)
	}
}

// PublishFile publishes a copy of the file src over dst (see Publish).
func PublishFile(tb testing.TB, src, dst string) {
	tb.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	Publish(tb, data, dst)
}
