// Package arrowtest builds Arrow arrays in C memory to the Arrow C Data Interface spec,
// as arrow-go's cdata package exports them, for the tests of dlrm.BatchFromArrow: the
// module has no external dependencies (no arrow-go), and cgo is not allowed in _test.go
// files.
//
// Every schema and array it makes has a release callback that releases its children
// and frees what it allocated, and marks it released, as the spec asks of a producer.
package arrowtest

/*
#cgo pkg-config: dlrm
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The spec's structs, as the C ABI's header declares them (under the spec's guard).
#include "dlrm/dlrm.h"

// Releases the children (whose structs this package allocated), then the strings and
// the children array; the struct itself belongs to whoever holds it.
static void release_schema(struct ArrowSchema* s) {
	for (int64_t i = 0; i < s->n_children; ++i) {
		if (s->children[i]->release != NULL) s->children[i]->release(s->children[i]);
		free(s->children[i]);
	}
	free(s->children);
	free((void*)s->format);
	free((void*)s->name);
	s->release = NULL;
}

static void release_array(struct ArrowArray* a) {
	for (int64_t i = 0; i < a->n_children; ++i) {
		if (a->children[i]->release != NULL) a->children[i]->release(a->children[i]);
		free(a->children[i]);
	}
	free(a->children);
	for (int64_t i = 0; i < a->n_buffers; ++i) free((void*)a->buffers[i]);
	free((void*)a->buffers);
	a->release = NULL;
}

static char* copy_str(const char* s) {
	char* out = (char*)malloc(strlen(s) + 1);
	strcpy(out, s);
	return out;
}

static struct ArrowSchema* new_schema(const char* format, const char* name, int64_t n_children) {
	struct ArrowSchema* s = (struct ArrowSchema*)calloc(1, sizeof *s);
	s->format = copy_str(format);
	s->name = copy_str(name);
	s->flags = ARROW_FLAG_NULLABLE;
	s->n_children = n_children;
	s->children = (struct ArrowSchema**)calloc(n_children + 1, sizeof(struct ArrowSchema*));
	s->release = release_schema;
	return s;
}

static struct ArrowArray* new_array(int64_t length, int64_t null_count, int64_t n_buffers,
                                    int64_t n_children) {
	struct ArrowArray* a = (struct ArrowArray*)calloc(1, sizeof *a);
	a->length = length;
	a->null_count = null_count;
	a->n_buffers = n_buffers;
	a->n_children = n_children;
	a->buffers = (const void**)calloc(n_buffers, sizeof(void*));
	a->children = (struct ArrowArray**)calloc(n_children + 1, sizeof(struct ArrowArray*));
	a->release = release_array;
	return a;
}

// Buffer i becomes a copy of the n bytes at data (a 1-byte allocation when n is 0, so
// that an empty buffer is not NULL).
static void set_buffer(struct ArrowArray* a, int64_t i, const void* data, size_t n) {
	void* p = malloc(n > 0 ? n : 1);
	if (n > 0) memcpy(p, data, n);
	a->buffers[i] = p;
}

static void set_child(struct ArrowSchema* s, struct ArrowArray* a, int64_t i,
                      struct ArrowSchema* child_schema, struct ArrowArray* child_array) {
	s->children[i] = child_schema;
	a->children[i] = child_array;
}
*/
import "C"

import "unsafe"

// Column is an array and its schema in C memory, to become a child of a List or a
// Record, which then own it.
type Column struct {
	schema *C.struct_ArrowSchema
	array  *C.struct_ArrowArray
}

// Float32 is a float32 column ("f"); valid is nil (no nulls) or says which rows are set.
func Float32(name string, values []float32, valid []bool) Column {
	return primitive("f", name, values, valid)
}

// Float64 is a float64 column ("g").
func Float64(name string, values []float64, valid []bool) Column {
	return primitive("g", name, values, valid)
}

// Int32 is an int32 column ("i").
func Int32(name string, values []int32, valid []bool) Column {
	return primitive("i", name, values, valid)
}

// Int64 is an int64 column ("l").
func Int64(name string, values []int64, valid []bool) Column {
	return primitive("l", name, values, valid)
}

// Bool is a bool column ("b"), its values bit-packed.
func Bool(name string, values []bool) Column {
	c := newColumn("b", name, len(values), 2, 0, nil)
	bits := bitmap(values)
	C.set_buffer(c.array, 1, bytesOf(bits), C.size_t(len(bits)))
	return c
}

// List is a list column ("+l") over values: row r holds values[offsets[r]:offsets[r+1]].
// valid is nil or says which rows are set (a null row's offsets may span values).
func List(name string, offsets []int32, values Column, valid []bool) Column {
	return list("+l", name, offsets, values, valid)
}

// LargeList is a large_list column ("+L"): List with int64 offsets.
func LargeList(name string, offsets []int64, values Column, valid []bool) Column {
	return list("+L", name, offsets, values, valid)
}

func primitive[T float32 | float64 | int32 | int64](format, name string, values []T,
	valid []bool) Column {
	c := newColumn(format, name, len(values), 2, 0, valid)
	var zero T
	C.set_buffer(c.array, 1, bytesOf(values), C.size_t(len(values))*C.size_t(unsafe.Sizeof(zero)))
	return c
}

func list[T int32 | int64](format, name string, offsets []T, values Column,
	valid []bool) Column {
	c := newColumn(format, name, len(offsets)-1, 2, 1, valid)
	var zero T
	C.set_buffer(c.array, 1, bytesOf(offsets), C.size_t(len(offsets))*C.size_t(unsafe.Sizeof(zero)))
	C.set_child(c.schema, c.array, 0, values.schema, values.array)
	return c
}

// newColumn allocates a schema and an array of length rows with n_buffers buffers
// (buffer 0, the validity bitmap, set from valid) and room for n_children children.
func newColumn(format, name string, length, buffers, children int, valid []bool) Column {
	cformat, cname := C.CString(format), C.CString(name)
	defer C.free(unsafe.Pointer(cformat))
	defer C.free(unsafe.Pointer(cname))
	nulls := 0
	for _, v := range valid {
		if !v {
			nulls++
		}
	}
	c := Column{schema: C.new_schema(cformat, cname, C.int64_t(children)),
		array: C.new_array(C.int64_t(length), C.int64_t(nulls), C.int64_t(buffers),
			C.int64_t(children))}
	if valid != nil {
		bits := bitmap(valid)
		C.set_buffer(c.array, 0, bytesOf(bits), C.size_t(len(bits)))
	}
	return c
}

// bitmap packs b least significant bit first, as Arrow's validity and bool buffers are.
func bitmap(b []bool) []byte {
	out := make([]byte, (len(b)+7)/8)
	for i, set := range b {
		if set {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return out
}

// bytesOf returns the address of s's first element, or nil when s is empty.
func bytesOf[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// Record is a struct array ("+s") of columns, the form of an exported record batch. Its
// root structs are in C memory; Release releases and frees them.
type Record struct {
	Column
}

// NewRecord makes a record of rows rows from cols, which it then owns.
func NewRecord(rows int, cols ...Column) *Record {
	r := &Record{newColumn("+s", "", rows, 1, len(cols), nil)}
	for i, c := range cols {
		C.set_child(r.schema, r.array, C.int64_t(i), c.schema, c.array)
	}
	return r
}

// Schema returns the address of the record's struct ArrowSchema.
func (r *Record) Schema() unsafe.Pointer { return unsafe.Pointer(r.schema) }

// Array returns the address of the record's struct ArrowArray.
func (r *Record) Array() unsafe.Pointer { return unsafe.Pointer(r.array) }

// Released reports whether the schema or the array has been released (by anyone).
func (r *Record) Released() bool {
	return r.schema.release == nil || r.array.release == nil
}

// Release releases the schema and the array (unless released already) with the release
// functions their callbacks point to, then frees the root structs. The record must not
// be used afterwards.
func (r *Record) Release() {
	if r.schema.release != nil {
		C.release_schema(r.schema)
	}
	if r.array.release != nil {
		C.release_array(r.array)
	}
	C.free(unsafe.Pointer(r.schema))
	C.free(unsafe.Pointer(r.array))
	r.schema, r.array = nil, nil
}
