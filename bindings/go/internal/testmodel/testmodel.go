// Package testmodel loads the small model that the C ABI test and the Python, Java and
// Go suites share (tests/data/small_model.pbtxt), so every language tests the same model.
package testmodel

import (
	"os"
	"path/filepath"
	"runtime"
)

// Config returns the shared model's protobuf text. It panics when the file is missing:
// the test suites cannot run without it.
func Config() string {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		panic("testmodel: cannot locate the source file")
	}
	path := filepath.Join(filepath.Dir(self), "..", "..", "..", "..", "tests", "data", "small_model.pbtxt")
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(data)
}
