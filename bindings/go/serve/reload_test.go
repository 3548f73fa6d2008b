package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"libdlrm.dev/dlrm"
	"libdlrm.dev/dlrm/internal/ckpttest"
	"libdlrm.dev/dlrm/serve"
)

// models is a series of checkpoints of the small model, and the probabilities each
// gives for request(), from a Predictor opened on its file.
type models struct {
	paths []string
	want  [][]float32
}

// makeModels saves n checkpoints, trained for 1, 2, ..., n steps.
func makeModels(t *testing.T, n int) models {
	t.Helper()
	dir := t.TempDir()
	var m models
	for k := 0; k < n; k++ {
		path := filepath.Join(dir, fmt.Sprintf("ckpt-%d", k))
		ckpttest.Save(t, config, k+1, path)
		p, err := dlrm.OpenPredictor(path)
		if err != nil {
			t.Fatal(err)
		}
		r := request()
		want, err := p.Predict(&dlrm.Batch{BatchSize: r.BatchSize, NumDense: r.NumDense,
			Dense: r.Dense, NumSparse: r.NumSparse, Lengths: r.Lengths, IDs: r.IDs})
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		m.paths = append(m.paths, path)
		m.want = append(m.want, want)
	}
	for k := 1; k < n; k++ {
		if sameBits(m.want[k], m.want[k-1]) {
			t.Fatalf("checkpoints %d and %d predict alike", k-1, k)
		}
	}
	return m
}

// which returns the index of the model whose probabilities got are, bitwise, or -1.
func (m models) which(got []float32) int {
	for k, want := range m.want {
		if sameBits(got, want) {
			return k
		}
	}
	return -1
}

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

// newReloader publishes checkpoint src at a served path and returns a Reloader on it.
func newReloader(t *testing.T, src string) (*serve.Reloader, string) {
	t.Helper()
	served := filepath.Join(t.TempDir(), "model.ckpt")
	ckpttest.PublishFile(t, src, served)
	r, err := serve.NewReloader(served, "")
	if err != nil {
		t.Fatal(err)
	}
	r.Logf = t.Logf
	t.Cleanup(func() { r.Close() })
	return r, served
}

// scoreOnce posts request() and returns the probabilities, or an error for any failure.
func scoreOnce(c *http.Client, url, body string) ([]float32, error) {
	resp, err := c.Post(url+"/predict", "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var pr serve.PredictResponse
	if err := json.Unmarshal(data, &pr); err != nil {
		return nil, err
	}
	return pr.Probabilities, nil
}

// loadTest keeps 8 goroutines scoring until stop is closed. Each response must come
// from a known model, and from the model of the last reload finished before the request
// was sent, or a later one.
type loadTest struct {
	m        models
	url      string
	body     string
	client   *http.Client
	minModel atomic.Int64 // the model every request sent from now on must get, or later
	ok       atomic.Int64
	failures chan string
	stop     chan struct{}
	wg       sync.WaitGroup
}

func (l *loadTest) start(workers, minPerWorker int) {
	for g := 0; g < workers; g++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					if i >= minPerWorker {
						return
					}
				default:
				}
				l.one()
			}
		}()
	}
}

func (l *loadTest) one() {
	floor := int(l.minModel.Load())
	got, err := scoreOnce(l.client, l.url, l.body)
	if err != nil {
		l.failures <- err.Error()
		return
	}
	if k := l.m.which(got); k < floor {
		l.failures <- fmt.Sprintf("probabilities %v are model %d's, sent after model %d was loaded", got, k, floor)
		return
	}
	l.ok.Add(1)
}

// waitProgress waits until n more requests have succeeded.
func (l *loadTest) waitProgress(t *testing.T, n int64) {
	t.Helper()
	target := l.ok.Load() + n
	for deadline := time.Now().Add(30 * time.Second); l.ok.Load() < target; {
		if time.Now().After(deadline) {
			t.Fatalf("the load made no progress: %d of %d requests", l.ok.Load(), target)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReloadUnderLoad replaces the served checkpoint 5 times (a new file renamed over
// it, then a reload by POST /reload or Reloader.Reload) while 8 goroutines keep scoring
// through a real server: no request may fail, and responses switch to the new model's
// predictions, bitwise.
func TestReloadUnderLoad(t *testing.T) {
	const reloads = 5
	m := makeModels(t, reloads+1)
	r, served := newReloader(t, m.paths[0])
	srv := httptest.NewServer(serve.NewHandler(r))
	defer srv.Close()
	l := &loadTest{m: m, url: srv.URL, body: mustJSON(t, request()), failures: make(chan string, 1<<16),
		stop: make(chan struct{}), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	defer l.client.CloseIdleConnections()
	l.start(8, 50)
	for k := 1; k <= reloads; k++ {
		l.waitProgress(t, 40)
		ckpttest.PublishFile(t, m.paths[k], served)
		if k%2 == 1 {
			if status, body := postReload(t, srv.URL, ""); status != http.StatusOK {
				t.Fatalf("POST /reload: %d %s", status, body)
			}
		} else if _, err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		l.minModel.Store(int64(k))
		if got, err := scoreOnce(l.client, srv.URL, l.body); err != nil || !sameBits(got, m.want[k]) {
			t.Fatalf("after reload %d: %v, %v; want model %d's %v", k, got, err, k, m.want[k])
		}
	}
	l.waitProgress(t, 16)
	close(l.stop)
	l.wg.Wait()
	close(l.failures)
	for f := range l.failures {
		t.Error(f)
	}
	if s := r.Stats(); s.Succeeded != reloads || s.Failed != 0 {
		t.Errorf("Stats() = %+v, want %d successes", s, reloads)
	}
	metrics := scrape(t, srv.URL)
	if got, want := metrics[key("dlrm_serve_requests_total", "route", "/predict", "code", "200")],
		float64(l.ok.Load()+reloads); got != want {
		t.Errorf("/metrics counts %v answered /predict requests, want %v", got, want)
	}
	t.Logf("%d requests across %d reloads", l.ok.Load(), reloads)
}

// TestPredictDuringReloads calls Reloader.Predict from 4 goroutines while the model is
// reloaded 20 times, alternating two checkpoints: calls that reach a model as it is
// closed are retried on its successor, so none fails.
func TestPredictDuringReloads(t *testing.T) {
	m := makeModels(t, 2)
	r, served := newReloader(t, m.paths[0])
	r.Logf = func(string, ...interface{}) {}
	req := request()
	b := &dlrm.Batch{BatchSize: req.BatchSize, NumDense: req.NumDense, Dense: req.Dense,
		NumSparse: req.NumSparse, Lengths: req.Lengths, IDs: req.IDs}
	stop := make(chan struct{})
	const workers = 4
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if got, err := r.Predict(b); err != nil || m.which(got) < 0 {
					errs <- fmt.Errorf("Predict during a reload: %v, %v", got, err)
					return
				}
			}
		}()
	}
	for k := 1; k <= 20; k++ {
		ckpttest.PublishFile(t, m.paths[k%2], served)
		if _, err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	for g := 0; g < workers; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// postReload posts /reload with the token (none if empty) and returns the status and body.
func postReload(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/reload", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// wantServing checks that the handler still scores with model k and reports its step.
func wantServing(t *testing.T, h http.Handler, m models, k int) {
	t.Helper()
	rec := post(t, h, mustJSON(t, request()))
	var resp serve.PredictResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != http.StatusOK ||
		!sameBits(resp.Probabilities, m.want[k]) {
		t.Errorf("POST /predict: %d %s; want model %d's %v", rec.Code, rec.Body, k, m.want[k])
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var health serve.HealthResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &health); err != nil || health.Model == nil ||
		health.Model.Step != int64(k+1) {
		t.Errorf("GET /healthz: %s; want step %d", rec.Body, k+1)
	}
}

// reloadVia posts /reload to h and returns the recorder.
func reloadVia(h http.Handler) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/reload", nil))
	return rec
}

// TestFailedReloadKeepsServing publishes a truncated checkpoint, one of another model and
// none at all: each reload fails, is counted in /metrics and leaves the old model serving.
func TestFailedReloadKeepsServing(t *testing.T) {
	m := makeModels(t, 2)
	r, served := newReloader(t, m.paths[0])
	h := serve.NewHandler(r)
	data, err := os.ReadFile(m.paths[1])
	if err != nil {
		t.Fatal(err)
	}

	ckpttest.Publish(t, data[:len(data)/2], served)
	rec := reloadVia(h)
	wantError(t, rec, http.StatusInternalServerError, "reload failed, still serving step 1")
	wantServing(t, h, m, 0)

	other := filepath.Join(t.TempDir(), "other.ckpt")
	ckpttest.Save(t, strings.Replace(config, "num_rows: 50", "num_rows: 60", 1), 1, other)
	ckpttest.PublishFile(t, other, served)
	rec = reloadVia(h)
	wantError(t, rec, http.StatusInternalServerError, "another model")
	if !strings.Contains(rec.Body.String(), `"FAILED_PRECONDITION"`) {
		t.Errorf("another model: %s", rec.Body)
	}
	wantServing(t, h, m, 0)

	os.Remove(served)
	if _, err := r.Reload(); !errors.Is(err, dlrm.ErrIO) {
		t.Errorf("reload of a missing file: %v, want an IO error", err)
	}
	wantServing(t, h, m, 0)
	metrics := scrape(t, httpServer(t, h))
	wantMetric(t, metrics, 3, "dlrm_serve_reloads_total", "outcome", "failure")
	wantMetric(t, metrics, 0, "dlrm_serve_reloads_total", "outcome", "success")
	wantMetric(t, metrics, 1, "dlrm_serve_model_step")
	wantMetric(t, metrics, 2, "dlrm_serve_requests_total", "route", "/reload", "code", "500")

	ckpttest.PublishFile(t, m.paths[1], served)
	if rec := reloadVia(h); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"step":2`) {
		t.Errorf("POST /reload of a good file: %d %s", rec.Code, rec.Body)
	}
	wantServing(t, h, m, 1)
	if s := r.Stats(); s != (serve.ReloadStats{Succeeded: 1, Failed: 3}) {
		t.Errorf("Stats() = %+v", s)
	}
}

// TestWatch reloads when the file is replaced, tries a bad file once only, and reloads
// again once the file changes.
func TestWatch(t *testing.T) {
	m := makeModels(t, 3)
	r, served := newReloader(t, m.paths[0])
	h := serve.NewHandler(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Watch(ctx, 5*time.Millisecond)
	}()
	defer func() { cancel(); <-done }()

	ckpttest.PublishFile(t, m.paths[1], served)
	waitFor(t, "the new checkpoint", func() bool { info, _ := r.Model(); return info.Step == 2 })
	wantServing(t, h, m, 1)

	data, _ := os.ReadFile(m.paths[2])
	ckpttest.Publish(t, data[:100], served)
	waitFor(t, "the failed reload", func() bool { return r.Stats().Failed == 1 })
	time.Sleep(50 * time.Millisecond) // ten more polls: the same bad file is not retried
	if s := r.Stats(); s.Failed != 1 || s.Succeeded != 1 {
		t.Errorf("Stats() = %+v, want 1 success and 1 failure", s)
	}
	wantServing(t, h, m, 1)

	ckpttest.PublishFile(t, m.paths[2], served)
	waitFor(t, "the repaired checkpoint", func() bool { info, _ := r.Model(); return info.Step == 3 })
	wantServing(t, h, m, 2)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestReloaderClosed: once closed, a Reloader scores nothing and every route says 503.
func TestReloaderClosed(t *testing.T) {
	m := makeModels(t, 1)
	r, _ := newReloader(t, m.paths[0])
	h := serve.NewHandler(r)
	r.Close()
	wantError(t, post(t, h, mustJSON(t, request())), http.StatusServiceUnavailable, "no model is loaded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	wantError(t, rec, http.StatusServiceUnavailable, "no model is loaded")
	wantError(t, reloadVia(h), http.StatusServiceUnavailable, "no model is loaded")
	if _, err := r.Reload(); !errors.Is(err, serve.ErrNoModel) {
		t.Errorf("Reload after Close: %v", err)
	}
	wantMetric(t, scrape(t, httpServer(t, h)), 0, "dlrm_serve_model_loaded")
}

// TestReloadMethodAndToken: /reload takes POST only and, with a token set, the token.
func TestReloadMethodAndToken(t *testing.T) {
	m := makeModels(t, 1)
	r, _ := newReloader(t, m.paths[0])
	h := serve.NewHandler(r)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/reload", nil))
	wantError(t, rec, http.StatusMethodNotAllowed, "POST")
	if rec.Header().Get("Allow") != "POST" {
		t.Errorf("Allow %q", rec.Header().Get("Allow"))
	}

	h.ReloadToken = "s3cret"
	url := httpServer(t, h)
	for _, token := range []string{"", "wrong"} {
		if status, body := postReload(t, url, token); status != http.StatusUnauthorized ||
			!strings.Contains(body, "UNAUTHENTICATED") {
			t.Errorf("POST /reload with token %q: %d %s", token, status, body)
		}
	}
	if status, body := postReload(t, url, "s3cret"); status != http.StatusOK {
		t.Errorf("POST /reload with the token: %d %s", status, body)
	}
}

// httpServer serves h until the test ends and returns its URL.
func httpServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
