package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"libdlrm.dev/dlrm"
)

// ErrorResponse is the JSON body of a failed request.
type ErrorResponse struct {
	// Error says what was wrong; for bad input it names the request's JSON fields
	// ("batch_size", "dense", "lengths[5]", "ids[3]", ...).
	Error string `json:"error"`
	// Code is the libdlrm status code name ("INVALID_ARGUMENT", "OUT_OF_RANGE",
	// "FAILED_PRECONDITION", "DATA_LOSS", ...) or, for a refusal by HTTP itself,
	// "NOT_FOUND" (404) or "UNAUTHENTICATED" (401).
	Code string `json:"code"`
}

// jsonFields renames the batch fields in the messages of the binding (batch.Dense,
// BatchSize*NumDense) and of the engine (batch.ids[3], batch.num_ids) after the request's
// JSON fields. Earlier pairs win where several match at the same place.
var jsonFields = strings.NewReplacer(
	// dlrm.Batch.validate, in the Go binding
	"batch.BatchSize", "batch_size",
	"batch.NumDense", "num_dense",
	"batch.NumSparse", "num_sparse",
	"batch.Dense", "dense",
	"batch.Lengths", "lengths",
	"batch.IDs", "ids",
	"batch.Weights", "weights",
	"BatchSize", "batch_size",
	"NumDense", "num_dense",
	"NumSparse", "num_sparse",
	"IDs", "ids",
	"(use nil for unit weights)", "(omit weights for unit weights)",
	// ValidateBatch, in the engine
	"batch.num_ids is", "the number of ids is",
	"batch.num_ids", "the number of ids",
	"is NULL", "is missing",
	"batch.", "", // batch.batch_size, batch.dense[b][j], batch.lengths[i], batch.ids[i], ...
)

// badInputMessage is the message of a 400 answer to an engine error about the batch.
func badInputMessage(engineMsg string) string { return jsonFields.Replace(engineMsg) }

// httpStatus maps an engine status code to an HTTP status.
func httpStatus(c dlrm.Code) int {
	switch c {
	case dlrm.InvalidArgument, dlrm.OutOfRange:
		return http.StatusBadRequest
	case dlrm.FailedPrecondition, dlrm.ResourceExhausted, dlrm.Cancelled:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// writeScoreError answers a failed Predict: 400 for bad input, with the message in the
// request's terms, 503 while no model can score, 500 otherwise.
func writeScoreError(w http.ResponseWriter, err error) {
	var de *dlrm.Error
	if !errors.As(err, &de) {
		writeError(w, http.StatusInternalServerError, dlrm.Internal.String(), err.Error())
		return
	}
	status, msg := httpStatus(de.Code), de.Msg
	if status == http.StatusBadRequest {
		msg = badInputMessage(msg)
	}
	writeError(w, status, de.Code.String(), msg)
}

// decodeError returns the status and message for an error of json.Decoder.Decode.
func decodeError(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is larger than %d bytes", tooLarge.Limit)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return http.StatusBadRequest, fmt.Sprintf("malformed JSON request: %q must be %s, not %s",
			typeErr.Field, jsonKind(typeErr.Type), article(typeErr.Value))
	case err.Error() == "EOF":
		return http.StatusBadRequest, "malformed JSON request: the body is empty"
	}
	return http.StatusBadRequest, "malformed JSON request: " + strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind says what JSON value a Go type of PredictRequest takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int32:
		return "an integer in [-2^31, 2^31)"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float32:
		return "a number within float32's range"
	case reflect.Slice:
		return "an array"
	}
	return "a " + t.String()
}

// article puts "a" or "an" before a JSON kind ("string", "object"); it leaves a value
// ("number 1e39") as it is.
func article(value string) string {
	switch value {
	case "array", "object":
		return "an " + value
	case "string", "bool", "number":
		return "a " + value
	}
	return value
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data, _ = json.Marshal(ErrorResponse{Error: err.Error(), Code: dlrm.Internal.String()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
