package serve_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"libdlrm.dev/dlrm/internal/ckpttest"
	"libdlrm.dev/dlrm/serve"
)

// The Prometheus text exposition format, version 0.0.4.
var (
	helpLine   = regexp.MustCompile(`^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$`)
	typeLine   = regexp.MustCompile(`^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|summary|histogram|untyped)$`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)`)
)

// key names a sample: the metric and its labels, sorted by name.
func key(name string, labels ...string) string {
	pairs := make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+strconv.Quote(labels[i+1]))
	}
	sort.Strings(pairs)
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// parseLabels splits the inside of {...} into alternating names and values.
func parseLabels(t *testing.T, s string) []string {
	t.Helper()
	var labels []string
	for s != "" {
		m := labelPair.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("bad labels %q", s)
		}
		value := strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\n`, "\n").Replace(m[2])
		labels = append(labels, m[1], value)
		s = s[len(m[0]):]
	}
	return labels
}

// family is the metric a sample belongs to: a summary's _sum and _count are its own.
func family(name string, types map[string]string) string {
	for _, suffix := range []string{"_sum", "_count"} {
		base := strings.TrimSuffix(name, suffix)
		if base != name && types[base] == "summary" {
			return base
		}
	}
	return name
}

// parseMetrics checks text line by line against the exposition format (a HELP and a TYPE
// line per family before its samples, the samples of a family together, names, labels,
// values) and returns the samples by key.
func parseMetrics(t *testing.T, text string) map[string]float64 {
	t.Helper()
	if !strings.HasSuffix(text, "\n") {
		t.Fatalf("exposition does not end with a line feed: %q", text)
	}
	samples := map[string]float64{}
	types, helps := map[string]string{}, map[string]bool{}
	current := ""
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if m := helpLine.FindStringSubmatch(line); m != nil {
			if helps[m[1]] || m[2] == "" {
				t.Errorf("line %d: repeated or empty HELP: %q", i+1, line)
			}
			helps[m[1]] = true
			continue
		}
		if m := typeLine.FindStringSubmatch(line); m != nil {
			if types[m[1]] != "" || !helps[m[1]] {
				t.Errorf("line %d: repeated TYPE, or TYPE without HELP: %q", i+1, line)
			}
			types[m[1]], current = m[2], m[1]
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %d is not a sample, a HELP or a TYPE line: %q", i+1, line)
		}
		if f := family(m[1], types); f != current {
			t.Errorf("line %d: sample of %q outside its family (after TYPE %q)", i+1, f, current)
		}
		value, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Errorf("line %d: bad value: %q", i+1, line)
		}
		k := key(m[1], parseLabels(t, m[2])...)
		if _, dup := samples[k]; dup {
			t.Errorf("line %d: repeated sample %s", i+1, k)
		}
		checkSample(t, m[1], types[current], value, line)
		samples[k] = value
	}
	return samples
}

// checkSample checks a sample's value against its type.
func checkSample(t *testing.T, name, typ string, value float64, line string) {
	t.Helper()
	switch {
	case typ == "counter" || strings.HasSuffix(name, "_count"):
		if value < 0 || value != math.Trunc(value) || !strings.HasSuffix(name, "_total") && typ == "counter" {
			t.Errorf("bad counter sample %q", line)
		}
	case typ == "summary" && !strings.HasSuffix(name, "_sum"):
		if !strings.Contains(line, `quantile="`) {
			t.Errorf("summary sample without a quantile: %q", line)
		}
	}
}

// scrape gets /metrics from the server at url, checks it and returns its samples.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s %v", resp.StatusCode, data, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("GET /metrics: Content-Type %q", ct)
	}
	return parseMetrics(t, string(data))
}

func wantMetric(t *testing.T, samples map[string]float64, want float64, name string, labels ...string) {
	t.Helper()
	k := key(name, labels...)
	if got, ok := samples[k]; !ok || got != want {
		t.Errorf("%s = %v (present: %v), want %v", k, got, ok, want)
	}
}

// TestMetrics makes requests of every kind and checks that /metrics counts them.
func TestMetrics(t *testing.T) {
	start := time.Now()
	m := makeModels(t, 2)
	r, served := newReloader(t, m.paths[0])
	h := serve.NewHandler(r)
	h.MaxBodyBytes = 4096
	good := mustJSON(t, request())
	bad := request()
	bad.IDs[0] = 50
	for _, body := range []string{good, good, good, mustJSON(t, bad), `{"batch_sise": 4}`,
		`{"dense": [` + strings.Repeat("0.5, ", 1000) + `0.5]}`} {
		post(t, h, body)
	}
	for _, req := range []*http.Request{httptest.NewRequest(http.MethodGet, "/predict", nil),
		httptest.NewRequest(http.MethodGet, "/healthz", nil), httptest.NewRequest(http.MethodHead, "/healthz", nil),
		httptest.NewRequest(http.MethodGet, "/elsewhere", nil)} {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	ckpttest.PublishFile(t, m.paths[1], served)
	if rec := reloadVia(h); rec.Code != http.StatusOK {
		t.Fatalf("POST /reload: %d %s", rec.Code, rec.Body)
	}
	url := httpServer(t, h)
	samples := scrape(t, url)
	for _, c := range []struct {
		route string
		code  int
		want  float64
	}{{"/predict", 200, 3}, {"/predict", 400, 2}, {"/predict", 413, 1}, {"/predict", 405, 1},
		{"/healthz", 200, 2}, {"other", 404, 1}, {"/reload", 200, 1}} {
		wantMetric(t, samples, c.want, "dlrm_serve_requests_total", "route", c.route, "code", fmt.Sprint(c.code))
	}
	checkLatency(t, samples, 7)
	wantMetric(t, samples, 12, "dlrm_serve_predicted_samples_total")
	wantMetric(t, samples, 1, "dlrm_serve_reloads_total", "outcome", "success")
	wantMetric(t, samples, 0, "dlrm_serve_reloads_total", "outcome", "failure")
	wantMetric(t, samples, 1, "dlrm_serve_model_loaded")
	wantMetric(t, samples, 2, "dlrm_serve_model_step")
	if ts := samples["dlrm_serve_model_loaded_timestamp_seconds"]; ts < float64(start.Unix()) ||
		ts > float64(time.Now().Unix()+1) {
		t.Errorf("dlrm_serve_model_loaded_timestamp_seconds = %v, not since %v", ts, start.Unix())
	}
	if got := len(samples); got != 18 {
		t.Errorf("%d samples, want 18: %v", got, samples)
	}
	// The first scrape counts once it has been answered.
	wantMetric(t, scrape(t, url), 1, "dlrm_serve_requests_total", "route", "/metrics", "code", "200")
}

// checkLatency checks the /predict latency summary of count requests.
func checkLatency(t *testing.T, samples map[string]float64, count float64) {
	t.Helper()
	wantMetric(t, samples, count, "dlrm_serve_predict_latency_seconds_count")
	if sum := samples["dlrm_serve_predict_latency_seconds_sum"]; !(sum > 0) {
		t.Errorf("latency sum %v", sum)
	}
	prev := 0.0
	for _, q := range []string{"0.5", "0.9", "0.99"} {
		v, ok := samples[key("dlrm_serve_predict_latency_seconds", "quantile", q)]
		if !ok || !(v >= prev) || v > samples["dlrm_serve_predict_latency_seconds_sum"] {
			t.Errorf("latency quantile %s = %v (present: %v), after %v", q, v, ok, prev)
		}
		prev = v
	}
}

// TestMetricsOfPredictor: over a plain Predictor, /metrics has no reload or model
// metrics, and the quantiles of no requests are NaN.
func TestMetricsOfPredictor(t *testing.T) {
	h := serve.NewHandler(newPredictor(t))
	samples := scrape(t, httpServer(t, h))
	for k, v := range samples {
		if strings.Contains(k, "reload") || strings.Contains(k, "model") {
			t.Errorf("unexpected sample %s %v", k, v)
		}
	}
	if v := samples[key("dlrm_serve_predict_latency_seconds", "quantile", "0.5")]; !math.IsNaN(v) {
		t.Errorf("median of no latencies = %v, want NaN", v)
	}
	wantMetric(t, samples, 0, "dlrm_serve_predict_latency_seconds_count")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/metrics", nil))
	wantError(t, rec, http.StatusMethodNotAllowed, "GET")
}
