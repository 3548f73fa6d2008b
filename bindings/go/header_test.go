package dlrm

// The binding covers every function of the C ABI: each DLRM_API function of
// include/dlrm/dlrm.h is called from the cgo code of this package, or listed below with
// the reason it is not. A function added to the header fails this test until the binding
// reaches it. (The Python binding's test_prototypes_cover_exactly_the_header.)

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// notCalled: header functions the Go binding deliberately does without.
var notCalled = map[string]string{
	"dlrm_status_name": "Code.String names the codes in Go (TestCodeString)",
}

func TestBindingCoversTheHeader(t *testing.T) {
	header, err := os.ReadFile(filepath.Join("..", "..", "include", "dlrm", "dlrm.h"))
	if err != nil {
		t.Fatal(err)
	}
	api := regexp.MustCompile(`DLRM_API\s+[\w\s*]+?\b(dlrm_\w+)\s*\(`)
	functions := api.FindAllStringSubmatch(string(header), -1)
	if len(functions) < 30 {
		t.Fatalf("found only %d DLRM_API functions in dlrm.h", len(functions))
	}
	var source strings.Builder
	goFiles, _ := filepath.Glob("*.go")
	cFiles, _ := filepath.Glob("*.h")
	for _, f := range append(goFiles, cFiles...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		source.Write(text)
	}
	for _, m := range functions {
		name := m[1]
		called := regexp.MustCompile(`\b` + name + `\(`).MatchString(source.String())
		if _, exempt := notCalled[name]; called == exempt {
			t.Errorf("%s: called %v, listed in notCalled %v", name, called, exempt)
		}
	}
}
