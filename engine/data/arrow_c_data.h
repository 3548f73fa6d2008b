// The Arrow C Data Interface's two structs (arrow.apache.org/docs/format/CDataInterface):
// a stable C ABI every Arrow producer (pyarrow, Arrow Java, arrow-go, DuckDB, Polars,
// Spark) exports, so no Arrow library is linked. The spec has every user declare them
// under the ARROW_C_DATA_INTERFACE guard, so whichever declaration a translation unit
// sees first (this one or include/dlrm/dlrm.h's) serves both.
#pragma once

#include <stdint.h>  // NOLINT: the same declaration as the C header's

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};

#endif  // ARROW_C_DATA_INTERFACE
