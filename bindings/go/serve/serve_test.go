package serve_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"libdlrm.dev/dlrm"
	"libdlrm.dev/dlrm/internal/ckpttest"
	"libdlrm.dev/dlrm/internal/testmodel"
	"libdlrm.dev/dlrm/serve"
)

// config is the small model shared with the C ABI test and the Python and Java suites.
var config = testmodel.Config()

// request is a valid /predict body of 4 samples: ckpttest.Batch without its labels.
func request() serve.PredictRequest {
	b := ckpttest.Batch()
	return serve.PredictRequest{BatchSize: b.BatchSize, NumDense: b.NumDense, Dense: b.Dense,
		NumSparse: b.NumSparse, Lengths: b.Lengths, IDs: b.IDs}
}

// newPredictor trains a model briefly, saves it and opens a Predictor on it.
func newPredictor(t *testing.T) *dlrm.Predictor {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.ckpt")
	ckpttest.Save(t, config, 5, path)
	p, err := dlrm.OpenPredictor(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func post(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/predict", strings.NewReader(body)))
	return rec
}

func mustJSON(t *testing.T, v interface{}) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// wantError checks the status and that the JSON error message contains every needle.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, needles ...string) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	var e serve.ErrorResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", rec.Body, err)
	}
	for _, n := range needles {
		if !strings.Contains(e.Error, n) {
			t.Errorf("error %q lacks %q", e.Error, n)
		}
	}
}

func TestPredictMatchesPredictor(t *testing.T) {
	p := newPredictor(t)
	h := serve.NewHandler(p)
	req := request()
	want, err := p.Predict(&dlrm.Batch{BatchSize: req.BatchSize, NumDense: req.NumDense,
		Dense: req.Dense, NumSparse: req.NumSparse, Lengths: req.Lengths, IDs: req.IDs})
	if err != nil {
		t.Fatal(err)
	}
	rec := post(t, h, mustJSON(t, req))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var resp serve.PredictResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	// encoding/json prints float32 in the shortest form that parses back exactly.
	if len(resp.Probabilities) != len(want) {
		t.Fatalf("got %v, want %v", resp.Probabilities, want)
	}
	for i := range want {
		if math.Float32bits(resp.Probabilities[i]) != math.Float32bits(want[i]) {
			t.Errorf("probability %d: got %v, want %v", i, resp.Probabilities[i], want[i])
		}
	}

	// Unit weights give the same answer.
	req.Weights = []float32{1, 1, 1, 1, 1, 1, 1, 1, 1}
	rec = post(t, h, mustJSON(t, req))
	var weighted serve.PredictResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &weighted); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	for i := range want {
		if math.Float32bits(weighted.Probabilities[i]) != math.Float32bits(want[i]) {
			t.Errorf("weighted probability %d: got %v, want %v", i, weighted.Probabilities[i], want[i])
		}
	}
}

func TestPredictBadRequests(t *testing.T) {
	h := serve.NewHandler(newPredictor(t))

	wantError(t, post(t, h, `{"batch_size": 4, "dense": [1, 2`), http.StatusBadRequest, "malformed JSON")
	wantError(t, post(t, h, `not json`), http.StatusBadRequest, "malformed JSON")
	wantError(t, post(t, h, `{"batch_size": "four"}`), http.StatusBadRequest, "malformed JSON")
	wantError(t, post(t, h, `{"batch_sise": 4}`), http.StatusBadRequest, "batch_sise")
	wantError(t, post(t, h, mustJSON(t, request())+`{}`), http.StatusBadRequest, "after the object")

	small := serve.NewHandler(newPredictor(t))
	small.MaxBodyBytes = 16
	wantError(t, post(t, small, mustJSON(t, request())), http.StatusRequestEntityTooLarge, "16 bytes")

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/predict", nil))
	wantError(t, rec, http.StatusMethodNotAllowed, "POST")
	if allow := rec.Header().Get("Allow"); allow != "POST" {
		t.Errorf("405 with Allow %q, want POST", allow)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nowhere", nil))
	wantError(t, rec, http.StatusNotFound, "/nowhere")
}

// TestErrorMessagesNameJSONFields: the engine's and the binding's messages about a bad
// batch come back naming the request's JSON fields, with the engine's code.
func TestErrorMessagesNameJSONFields(t *testing.T) {
	h := serve.NewHandler(newPredictor(t))
	r := request()
	r.IDs[0] = 50 // t0 has 50 rows
	wantFieldError(t, post(t, h, mustJSON(t, r)), "OUT_OF_RANGE", "ids[0] = 50")
	r = request()
	r.Dense = r.Dense[:5]
	wantFieldError(t, post(t, h, mustJSON(t, r)), "INVALID_ARGUMENT", "dense has length 5", "batch_size*num_dense")
	r = request()
	r.NumDense, r.Dense = 2, r.Dense[:8]
	wantFieldError(t, post(t, h, mustJSON(t, r)), "INVALID_ARGUMENT", "num_dense is 2")
	r = request()
	r.NumSparse = 1
	wantFieldError(t, post(t, h, mustJSON(t, r)), "INVALID_ARGUMENT", "lengths has length 8", "num_sparse*batch_size")
	r = request()
	r.IDs = r.IDs[:8]
	wantFieldError(t, post(t, h, mustJSON(t, r)), "INVALID_ARGUMENT", "number of ids is 8", "lengths sum to 9")
	r = request()
	r.Lengths[5] = -1
	wantFieldError(t, post(t, h, mustJSON(t, r)), "INVALID_ARGUMENT", "lengths[5]", "negative")
	r = request()
	r.Weights = []float32{1, 2}
	wantFieldError(t, post(t, h, mustJSON(t, r)), "INVALID_ARGUMENT", "weights has length 2", "ids has length 9")
	r = request()
	r.BatchSize = -1
	wantFieldError(t, post(t, h, mustJSON(t, r)), "INVALID_ARGUMENT", "batch_size must be >= 0")
	wantFieldError(t, post(t, h, `{}`), "INVALID_ARGUMENT", "batch_size must be in [1")
	wantError(t, post(t, h, `{"batch_size": "four"}`), http.StatusBadRequest, `"batch_size" must be an integer`)
	wantError(t, post(t, h, `{"lengths": [1, 3000000000]}`), http.StatusBadRequest, `"lengths" must be an integer`)
	wantError(t, post(t, h, ``), http.StatusBadRequest, "empty")
}

// goNames are the binding's and the engine's spellings that a 400 answer must not show.
var goNames = []string{"batch.", "BatchSize", "NumDense", "NumSparse", "Dense", "Lengths", "IDs",
	"Weights", "num_ids", "NULL", "use nil"}

// wantFieldError checks a 400 answer with the engine's code whose message contains every
// needle and names fields only as the JSON request does.
func wantFieldError(t *testing.T, rec *httptest.ResponseRecorder, code string, needles ...string) {
	t.Helper()
	wantError(t, rec, http.StatusBadRequest, needles...)
	var e serve.ErrorResponse
	json.Unmarshal(rec.Body.Bytes(), &e)
	if e.Code != code {
		t.Errorf("error %q has code %q, want %q", e.Error, e.Code, code)
	}
	for _, n := range goNames {
		if strings.Contains(e.Error, n) {
			t.Errorf("error %q names %q, not the JSON field", e.Error, n)
		}
	}
}

func TestClosedPredictor(t *testing.T) {
	p := newPredictor(t)
	h := serve.NewHandler(p)
	p.Close()
	wantError(t, post(t, h, mustJSON(t, request())), http.StatusServiceUnavailable, "closed")
}

func TestHealthz(t *testing.T) {
	h := serve.NewHandler(newPredictor(t))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"ok"`)) {
		t.Errorf("GET /healthz: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/healthz", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /healthz: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
	// A Handler over a Predictor has no /reload.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/reload", nil))
	wantError(t, rec, http.StatusNotFound, "/reload")
}

// TestConcurrentRequests serves many requests at once through a real server.
func TestConcurrentRequests(t *testing.T) {
	srv := httptest.NewServer(serve.NewHandler(newPredictor(t)))
	defer srv.Close()
	body := mustJSON(t, request())
	first := ""
	errs := make(chan string, 16)
	results := make(chan string, 16)
	for g := 0; g < 16; g++ {
		go func() {
			resp, err := http.Post(srv.URL+"/predict", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			if resp.StatusCode != http.StatusOK {
				errs <- buf.String()
				return
			}
			results <- buf.String()
		}()
	}
	for g := 0; g < 16; g++ {
		select {
		case e := <-errs:
			t.Error(e)
		case r := <-results:
			if first == "" {
				first = r
			} else if r != first {
				t.Errorf("responses differ: %s vs %s", r, first)
			}
		}
	}
}
