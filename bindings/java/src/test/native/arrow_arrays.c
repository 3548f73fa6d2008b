/* JNI helper of ArrowBatchTest (built only for the tests): a small Arrow record batch built by
 * hand to the C Data Interface spec, as Arrow Java's Data.exportVectorSchemaRoot exports one
 * (a struct array whose children are the columns), since Arrow Java itself is not available.
 *
 * The table: 6 rows, columns (ai.dlrm.ArrowTestData holds the same values in Java)
 *   x       float32    0.5 1.5 -2.25 3 0.125 -1
 *   y       float64    10.5 11.25 -12 0.75 13.5 2        (its array has offset 1)
 *   z       int32      1 -2 3 0 5 7
 *   click   int64      1 0 1 1 0 0
 *   a       list<int64>, int32 offsets: [3 7] null [49] [] [0 1 2] [10]
 *           (the null row spans two ids 999, outside the model's table: they must be ignored)
 *   b       large_list<int32>, int64 offsets: [4] [19 0] [] [5] [6] [7 8 9]
 *   wa      list<float32>, the weights of a: [0.5 2] null [1.5] [] [0.25 1 4] [3]
 *   x_null  float32    1 2 null 4 5 6
 *   w_short list<float32>, lengths of a but row 4 has 2 weights: [1 1] [] [1] [] [1 1] [1]
 *
 * Contract: create() returns {address of the struct ArrowSchema, address of the struct
 * ArrowArray}; both structs, their children and the table live in one allocation. The
 * producer's release callbacks follow the spec: a root's release releases its children, then
 * marks itself released (release = NULL); the allocation is freed once both roots are
 * released. release(schema, array) calls each root's release if it is still set; live()
 * says whether both roots are unreleased (call it only before release); tables() counts the
 * allocations not yet freed. No Arrow library is needed: the structs come from dlrm/dlrm.h. */
#include <jni.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm/dlrm.h"

#define ROWS 6
#define COLUMNS 9

static const float kX[ROWS] = {0.5f, 1.5f, -2.25f, 3.0f, 0.125f, -1.0f};
static const double kY[ROWS + 1] = {99.0, 10.5, 11.25, -12.0, 0.75, 13.5, 2.0};
static const int32_t kZ[ROWS] = {1, -2, 3, 0, 5, 7};
static const int64_t kClick[ROWS] = {1, 0, 1, 1, 0, 0};
static const uint8_t kRow1Null = 0x3D; /* rows 0, 2, 3, 4, 5 valid */
static const int32_t kAOffsets[ROWS + 1] = {0, 2, 4, 5, 5, 8, 9};
static const int64_t kAIds[9] = {3, 7, 999, 999, 49, 0, 1, 2, 10};
static const int64_t kBOffsets[ROWS + 1] = {0, 1, 3, 3, 4, 5, 8};
static const int32_t kBIds[8] = {4, 19, 0, 5, 6, 7, 8, 9};
static const float kWa[9] = {0.5f, 2.0f, 9.0f, 9.0f, 1.5f, 0.25f, 1.0f, 4.0f, 3.0f};
static const float kXNull[ROWS] = {1.0f, 2.0f, 0.0f, 4.0f, 5.0f, 6.0f};
static const uint8_t kRow2Null = 0x3B; /* rows 0, 1, 3, 4, 5 valid */
static const int32_t kShortOffsets[ROWS + 1] = {0, 2, 2, 3, 3, 5, 6};
static const float kOnes[6] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};

/* One column: its schema and array, and those of its values child (lists only). */
typedef struct {
  struct ArrowSchema schema, item_schema;
  struct ArrowArray array, item_array;
  struct ArrowSchema* schema_child;
  struct ArrowArray* array_child;
  const void* buffers[2];
  const void* item_buffers[2];
} column;

typedef struct {
  struct ArrowSchema schema;
  struct ArrowArray array;
  struct ArrowSchema* schema_children[COLUMNS];
  struct ArrowArray* array_children[COLUMNS];
  const void* buffers[1];
  column columns[COLUMNS];
  int unreleased_roots;
} table;

static int tables_alive = 0; /* the tests create tables on one thread */

static void release_table_if_done(table* t) {
  if (--t->unreleased_roots == 0) {
    free(t);
    --tables_alive;
  }
}

/* Children: marked released by their parent's release. */
static void release_child_schema(struct ArrowSchema* s) {
  int64_t i;
  for (i = 0; i < s->n_children; ++i)
    if (s->children[i]->release != NULL) s->children[i]->release(s->children[i]);
  s->release = NULL;
}

static void release_child_array(struct ArrowArray* a) {
  int64_t i;
  for (i = 0; i < a->n_children; ++i)
    if (a->children[i]->release != NULL) a->children[i]->release(a->children[i]);
  a->release = NULL;
}

static void release_root_schema(struct ArrowSchema* s) {
  table* t = (table*)s->private_data;
  release_child_schema(s);
  release_table_if_done(t);
}

static void release_root_array(struct ArrowArray* a) {
  table* t = (table*)a->private_data;
  release_child_array(a);
  release_table_if_done(t);
}

static void init_schema(struct ArrowSchema* s, const char* format, const char* name,
                        int64_t n_children, struct ArrowSchema** children) {
  s->format = format;
  s->name = name;
  s->metadata = NULL;
  s->flags = ARROW_FLAG_NULLABLE;
  s->n_children = n_children;
  s->children = children;
  s->dictionary = NULL;
  s->release = release_child_schema;
  s->private_data = NULL;
}

static void init_array(struct ArrowArray* a, int64_t length, int64_t offset,
                       const uint8_t* validity, int64_t null_count, const void** buffers,
                       const void* data, int64_t n_children, struct ArrowArray** children) {
  buffers[0] = validity;
  buffers[1] = data;
  a->length = length;
  a->null_count = null_count;
  a->offset = offset;
  a->n_buffers = 2;
  a->n_children = n_children;
  a->buffers = buffers;
  a->children = children;
  a->dictionary = NULL;
  a->release = release_child_array;
  a->private_data = NULL;
}

/* A column of numbers: format f, g, i or l; `offset` leading values skipped. */
static void numbers(column* c, const char* name, const char* format, const void* values,
                    int64_t offset, const uint8_t* validity) {
  init_schema(&c->schema, format, name, 0, NULL);
  init_array(&c->array, ROWS, offset, validity, validity != NULL ? 1 : 0, c->buffers, values, 0,
             NULL);
}

/* A list column (+l: int32 offsets, +L: int64) over num_values values of item_format. */
static void list(column* c, const char* name, const char* format, const void* offsets,
                 const uint8_t* validity, const char* item_format, const void* values,
                 int64_t num_values) {
  c->schema_child = &c->item_schema;
  c->array_child = &c->item_array;
  init_schema(&c->item_schema, item_format, "item", 0, NULL);
  init_array(&c->item_array, num_values, 0, NULL, 0, c->item_buffers, values, 0, NULL);
  init_schema(&c->schema, format, name, 1, &c->schema_child);
  init_array(&c->array, ROWS, 0, validity, validity != NULL ? 1 : 0, c->buffers, offsets, 1,
             &c->array_child);
}

static void build_columns(table* t) {
  column* c = t->columns;
  numbers(&c[0], "x", "f", kX, 0, NULL);
  numbers(&c[1], "y", "g", kY, 1, NULL);
  numbers(&c[2], "z", "i", kZ, 0, NULL);
  numbers(&c[3], "click", "l", kClick, 0, NULL);
  list(&c[4], "a", "+l", kAOffsets, &kRow1Null, "l", kAIds, 9);
  list(&c[5], "b", "+L", kBOffsets, NULL, "i", kBIds, 8);
  list(&c[6], "wa", "+l", kAOffsets, &kRow1Null, "f", kWa, 9);
  numbers(&c[7], "x_null", "f", kXNull, 0, &kRow2Null);
  list(&c[8], "w_short", "+l", kShortOffsets, NULL, "f", kOnes, 6);
}

/* The struct array of the table, or NULL when out of memory. */
static table* build_table(void) {
  table* t = (table*)calloc(1, sizeof *t);
  int i;
  if (t == NULL) return NULL;
  build_columns(t);
  for (i = 0; i < COLUMNS; ++i) {
    t->schema_children[i] = &t->columns[i].schema;
    t->array_children[i] = &t->columns[i].array;
  }
  init_schema(&t->schema, "+s", "", COLUMNS, t->schema_children);
  t->schema.flags = 0;
  t->schema.release = release_root_schema;
  t->schema.private_data = t;
  t->buffers[0] = NULL;
  t->array.length = ROWS;
  t->array.null_count = 0;
  t->array.offset = 0;
  t->array.n_buffers = 1;
  t->array.n_children = COLUMNS;
  t->array.buffers = t->buffers;
  t->array.children = t->array_children;
  t->array.dictionary = NULL;
  t->array.release = release_root_array;
  t->array.private_data = t;
  t->unreleased_roots = 2;
  ++tables_alive;
  return t;
}

JNIEXPORT jlongArray JNICALL Java_ai_dlrm_ArrowTestData_create(JNIEnv* env, jclass cls) {
  table* t = build_table();
  jlongArray out;
  jlong addresses[2];
  (void)cls;
  if (t == NULL) {
    jclass oom = (*env)->FindClass(env, "java/lang/OutOfMemoryError");
    if (oom != NULL) (*env)->ThrowNew(env, oom, "arrow_arrays.c");
    return NULL;
  }
  addresses[0] = (jlong)(uintptr_t)&t->schema;
  addresses[1] = (jlong)(uintptr_t)&t->array;
  out = (*env)->NewLongArray(env, 2);
  if (out == NULL) {
    t->schema.release(&t->schema);
    t->array.release(&t->array);
    return NULL;
  }
  (*env)->SetLongArrayRegion(env, out, 0, 2, addresses);
  return out;
}

JNIEXPORT void JNICALL Java_ai_dlrm_ArrowTestData_release(JNIEnv* env, jclass cls,
                                                          jlong schema_address,
                                                          jlong array_address) {
  struct ArrowSchema* schema = (struct ArrowSchema*)(uintptr_t)schema_address;
  struct ArrowArray* array = (struct ArrowArray*)(uintptr_t)array_address;
  /* Both read first: releasing the last live root frees the other root's memory. */
  const int schema_live = schema != NULL && schema->release != NULL;
  const int array_live = array != NULL && array->release != NULL;
  (void)env;
  (void)cls;
  if (schema_live) schema->release(schema);
  if (array_live) array->release(array);
}

JNIEXPORT jboolean JNICALL Java_ai_dlrm_ArrowTestData_live(JNIEnv* env, jclass cls,
                                                           jlong schema_address,
                                                           jlong array_address) {
  const struct ArrowSchema* schema = (const struct ArrowSchema*)(uintptr_t)schema_address;
  const struct ArrowArray* array = (const struct ArrowArray*)(uintptr_t)array_address;
  (void)env;
  (void)cls;
  return schema->release != NULL && array->release != NULL ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT jint JNICALL Java_ai_dlrm_ArrowTestData_tables(JNIEnv* env, jclass cls) {
  (void)env;
  (void)cls;
  return tables_alive;
}
