package serve

import (
	"bufio"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// LatencyWindow is the number of most recent /predict requests whose latencies give the
// quantiles of dlrm_serve_predict_latency_seconds.
const LatencyWindow = 1024

// latencyQuantiles are the quantiles /metrics reports.
var latencyQuantiles = [...]float64{0.5, 0.9, 0.99}

// metrics holds the counters of a Handler. Recording takes an atomic add, plus a short
// lock for a latency; only the first request of a route and status takes a write lock.
type metrics struct {
	mu       sync.RWMutex
	requests map[requestKey]*atomic.Uint64

	samples atomic.Uint64 // samples scored by successful /predict requests
	latency summary
}

type requestKey struct {
	route string
	code  int
}

// countRequest counts one request of route answered with status code.
func (m *metrics) countRequest(route string, code int) {
	k := requestKey{route, code}
	m.mu.RLock()
	c := m.requests[k]
	m.mu.RUnlock()
	if c == nil {
		m.mu.Lock()
		if c = m.requests[k]; c == nil {
			if m.requests == nil {
				m.requests = make(map[requestKey]*atomic.Uint64)
			}
			c = new(atomic.Uint64)
			m.requests[k] = c
		}
		m.mu.Unlock()
	}
	c.Add(1)
}

// requestCounts returns the request counts, sorted by route and status code.
func (m *metrics) requestCounts() ([]requestKey, []uint64) {
	m.mu.RLock()
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].route != keys[j].route {
			return keys[i].route < keys[j].route
		}
		return keys[i].code < keys[j].code
	})
	counts := make([]uint64, len(keys))
	for i, k := range keys {
		counts[i] = m.requests[k].Load()
	}
	m.mu.RUnlock()
	return keys, counts
}

// summary keeps the total of all observations and the last LatencyWindow of them.
type summary struct {
	mu     sync.Mutex
	window [LatencyWindow]float64
	count  uint64
	sum    float64
}

func (s *summary) observe(v float64) {
	s.mu.Lock()
	s.window[s.count%LatencyWindow] = v
	s.count++
	s.sum += v
	s.mu.Unlock()
}

// snapshot returns the window's quantiles (NaN while empty, by nearest rank), the sum and
// the count of every observation.
func (s *summary) snapshot() (q []float64, sum float64, count uint64) {
	s.mu.Lock()
	n := s.count
	if n > LatencyWindow {
		n = LatencyWindow
	}
	values := append([]float64(nil), s.window[:n]...)
	sum, count = s.sum, s.count
	s.mu.Unlock()
	sort.Float64s(values)
	q = make([]float64, len(latencyQuantiles))
	for i, phi := range latencyQuantiles {
		q[i] = math.NaN()
		if len(values) > 0 {
			rank := int(math.Ceil(phi*float64(len(values)))) - 1
			if rank < 0 {
				rank = 0
			}
			q[i] = values[rank]
		}
	}
	return q, sum, count
}

// promWriter writes the Prometheus text exposition format, version 0.0.4.
type promWriter struct{ w *bufio.Writer }

// family writes the HELP and TYPE lines of a metric.
func (p promWriter) family(name, typ, help string) {
	p.w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

// sample writes one sample; labels alternate names and values.
func (p promWriter) sample(name string, value float64, labels ...string) {
	p.w.WriteString(name)
	for i := 0; i+1 < len(labels); i += 2 {
		sep := ","
		if i == 0 {
			sep = "{"
		}
		p.w.WriteString(sep + labels[i] + `="` + labelEscaper.Replace(labels[i+1]) + `"`)
	}
	if len(labels) > 0 {
		p.w.WriteString("}")
	}
	p.w.WriteString(" " + formatValue(value) + "\n")
}

// labelEscaper escapes a label value: backslash, double quote and line feed.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// writeMetrics writes every metric of h.
func (h *Handler) writeMetrics(out io.Writer) error {
	p := promWriter{bufio.NewWriter(out)}
	p.family("dlrm_serve_requests_total", "counter", "HTTP requests answered, by route and status code.")
	keys, counts := h.metrics.requestCounts()
	for i, k := range keys {
		p.sample("dlrm_serve_requests_total", float64(counts[i]), "route", k.route, "code", strconv.Itoa(k.code))
	}
	p.family("dlrm_serve_predict_latency_seconds", "summary",
		"Latency of /predict requests; quantiles over the last "+strconv.Itoa(LatencyWindow)+" requests.")
	q, sum, count := h.metrics.latency.snapshot()
	for i, phi := range latencyQuantiles {
		p.sample("dlrm_serve_predict_latency_seconds", q[i], "quantile", formatValue(phi))
	}
	p.sample("dlrm_serve_predict_latency_seconds_sum", sum)
	p.sample("dlrm_serve_predict_latency_seconds_count", float64(count))
	p.family("dlrm_serve_predicted_samples_total", "counter", "Samples scored by successful /predict requests.")
	p.sample("dlrm_serve_predicted_samples_total", float64(h.metrics.samples.Load()))
	if h.models != nil {
		h.writeModelMetrics(p)
	}
	return p.w.Flush()
}

// writeModelMetrics writes the metrics of a Reloader: its reloads and its model.
func (h *Handler) writeModelMetrics(p promWriter) {
	stats := h.models.Stats()
	p.family("dlrm_serve_reloads_total", "counter", "Model reloads, by outcome (a failed one keeps the old model).")
	p.sample("dlrm_serve_reloads_total", float64(stats.Succeeded), "outcome", "success")
	p.sample("dlrm_serve_reloads_total", float64(stats.Failed), "outcome", "failure")
	info, ok := h.models.Model()
	loaded := 0.0
	if ok {
		loaded = 1
	}
	p.family("dlrm_serve_model_loaded", "gauge", "1 while a model is loaded, else 0.")
	p.sample("dlrm_serve_model_loaded", loaded)
	if !ok {
		return
	}
	p.family("dlrm_serve_model_step", "gauge", "Training steps of the checkpoint being served.")
	p.sample("dlrm_serve_model_step", float64(info.Step))
	p.family("dlrm_serve_model_loaded_timestamp_seconds", "gauge",
		"Unix time at which the model being served was loaded.")
	p.sample("dlrm_serve_model_loaded_timestamp_seconds", float64(info.LoadedAt.UnixNano())/1e9)
}
