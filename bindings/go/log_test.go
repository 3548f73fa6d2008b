package dlrm_test

// SetLogFunc: the library's log in Go. A job (distributed_test.go's) with a LogFunc set
// delivers the coordinator's, the server's and the trainers' lines to it, pointing at
// engine/ sources; a refused replacement leaves it installed; after SetLogFunc(nil) it
// gets nothing; a bad level is an *Error matching ErrInvalidArgument that names min_level.
// Every test restores the default sink (stderr at INFO).

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"libdlrm.dev/dlrm"
)

type logLine struct {
	level dlrm.LogLevel
	file  string
	line  int
	msg   string
}

// logCollector is a LogFunc keeping every message (it runs on library threads).
type logCollector struct {
	mu    sync.Mutex
	lines []logLine
}

func (c *logCollector) log(level dlrm.LogLevel, file string, line int, msg string) {
	c.mu.Lock()
	c.lines = append(c.lines, logLine{level, file, line, msg})
	c.mu.Unlock()
}

func (c *logCollector) all() []logLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]logLine(nil), c.lines...)
}

// defaultSinkAfter restores stderr at INFO when the test ends.
func defaultSinkAfter(t *testing.T) {
	t.Cleanup(func() {
		if err := dlrm.SetLogFunc(nil, dlrm.LogInfo); err != nil {
			t.Errorf("SetLogFunc(nil, LogInfo): %v", err)
		}
	})
}

// trainJob runs jobSteps steps on the job, with a checkpoint.
func trainJob(t *testing.T) {
	batches := make([]*dlrm.Batch, jobSteps)
	for i := range batches {
		batches[i] = makeBatch(i)
	}
	runJob(t, batches, []*dlrm.Batch{makeBatch(10)}, false, filepath.Join(t.TempDir(), "ckpt"))
}

func TestLogFuncReceivesTheJobsLines(t *testing.T) {
	defaultSinkAfter(t)
	var got, refused logCollector
	if err := dlrm.SetLogFunc(got.log, dlrm.LogInfo); err != nil {
		t.Fatal(err)
	}
	err := dlrm.SetLogFunc(refused.log, dlrm.LogLevel(9))
	wantError(t, err, dlrm.ErrInvalidArgument, "min_level") // got stays installed
	trainJob(t)

	wanted := map[string]*regexp.Regexp{
		"coordinator": regexp.MustCompile(`^coordinator .*: rendezvous complete: `),
		"server":      regexp.MustCompile(`^server 0 \(rank 0\) serves `),
		"server done": regexp.MustCompile(`^server 0: every trainer is done`),
		"checkpoints": regexp.MustCompile(`^trainer [01]: checkpoint of step 4 in `),
	}
	counts := map[string]int{}
	lines := got.all()
	for _, l := range lines {
		if !strings.HasPrefix(l.file, "engine/") || !strings.HasSuffix(l.file, ".cc") ||
			l.line <= 0 || strings.Contains(l.msg, "\n") {
			t.Errorf("malformed log line %+v", l)
		}
		for what, re := range wanted {
			if re.MatchString(l.msg) {
				counts[what]++
				if l.level != dlrm.LogInfo {
					t.Errorf("%q has level %v, want INFO", l.msg, l.level)
				}
			}
		}
	}
	want := map[string]int{"coordinator": 1, "server": 1, "server done": 1, "checkpoints": 2}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("lines seen %v, want %v; all lines: %+v", counts, want, lines)
	}
	if n := len(refused.all()); n != 0 {
		t.Errorf("the refused LogFunc got %d lines", n)
	}
}

func TestLogFuncGetsNothingAfterReset(t *testing.T) {
	defaultSinkAfter(t)
	var got logCollector
	if err := dlrm.SetLogFunc(got.log, dlrm.LogDebug); err != nil {
		t.Fatal(err)
	}
	if err := dlrm.SetLogFunc(nil, dlrm.LogOff); err != nil {
		t.Fatal(err)
	}
	trainJob(t)
	if lines := got.all(); len(lines) != 0 {
		t.Errorf("after SetLogFunc(nil, ...) the LogFunc got %+v", lines)
	}
}

func TestSetLogFuncRefusesBadLevelsByName(t *testing.T) {
	defaultSinkAfter(t)
	noop := func(dlrm.LogLevel, string, int, string) {}
	for _, bad := range []dlrm.LogLevel{dlrm.LogOff + 1, -1, 1 << 30} {
		err := dlrm.SetLogFunc(noop, bad)
		wantError(t, err, dlrm.ErrInvalidArgument, "min_level", fmt.Sprint(int32(bad)))
		if !errors.Is(err, dlrm.ErrInvalidArgument) {
			t.Errorf("errors.Is(%v, ErrInvalidArgument) = false", err)
		}
		wantError(t, dlrm.SetLogFunc(nil, bad), dlrm.ErrInvalidArgument, "min_level")
	}
}

func TestLogLevelsAndLoggerFunc(t *testing.T) {
	for level, want := range map[dlrm.LogLevel]string{dlrm.LogDebug: "DEBUG",
		dlrm.LogInfo: "INFO", dlrm.LogWarning: "WARNING", dlrm.LogError: "ERROR",
		dlrm.LogOff: "OFF", dlrm.LogLevel(7): "LogLevel(7)"} {
		if got := level.String(); got != want {
			t.Errorf("LogLevel(%d).String() = %q, want %q", int32(level), got, want)
		}
	}
	var buf bytes.Buffer
	dlrm.LoggerFunc(log.New(&buf, "job: ", 0))(dlrm.LogWarning, "engine/net/endpoint.cc", 289,
		"100% rejected")
	want := "job: [dlrm WARNING engine/net/endpoint.cc:289] 100% rejected\n"
	if got := buf.String(); got != want {
		t.Errorf("LoggerFunc wrote %q, want %q", got, want)
	}
}
