#include "engine/data/arrow_batch.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/core/status.h"

namespace dlrm {
namespace {

// One column of the struct: its schema and array, and the logical index in it of the
// batch's row 0 (the struct's offset: a struct's children are sliced by it).
struct Column {
  std::string name;
  const ArrowSchema* schema = nullptr;
  const ArrowArray* array = nullptr;
  int64_t first = 0;
};

// The largest offset believed: the interface carries no buffer sizes, so an offset past
// any possible memory (and every index sum below) is refused before it is used.
constexpr int64_t kMaxOffset = int64_t{1} << 48;

template <typename... Parts>
[[noreturn]] void Bad(const std::string& column, Parts&&... parts) {
  ThrowInvalid("Arrow column \"", column, "\": ", std::forward<Parts>(parts)...);
}

bool Bit(const void* bitmap, int64_t k) {
  return (static_cast<const uint8_t*>(bitmap)[k >> 3] >> (k & 7)) & 1;
}

// Whether logical element i of a is null.
bool IsNull(const ArrowArray& a, int64_t i) {
  if (a.null_count == 0 || a.n_buffers < 1 || a.buffers[0] == nullptr) return false;
  return !Bit(a.buffers[0], a.offset + i);
}

// The checks every array gets: alive, plain (not dictionary-encoded), the buffer count of
// its type, data buffers present, and at least `needed` elements.
void CheckArray(const std::string& name, const ArrowSchema& s, const ArrowArray& a, int64_t buffers,
                int64_t needed) {
  if (a.release == nullptr) Bad(name, "the array has been released");
  if (s.dictionary != nullptr || a.dictionary != nullptr)
    Bad(name, "is dictionary-encoded; decode it first");
  if (a.n_buffers != buffers || (buffers > 0 && a.buffers == nullptr))
    Bad(name, "has ", a.n_buffers, " buffers but its type (format \"", s.format, "\") has ",
        buffers);
  if (a.offset < 0 || a.offset > kMaxOffset || a.length < 0 || a.length > kMaxOffset)
    Bad(name, "offset ", a.offset, " or length ", a.length, " is outside [0, 2^48]");
  if (a.length < needed) Bad(name, "holds ", a.length, " values but ", needed, " are needed");
  for (int64_t k = 1; k < buffers; ++k)
    if (a.length > 0 && a.buffers[k] == nullptr) Bad(name, "buffer ", k, " is NULL");
}

// The child of the struct named `name` (exactly one).
Column Find(const ArrowSchema& schema, const ArrowArray& array, const std::string& name) {
  Column c;
  c.name = name;
  for (int64_t i = 0; i < schema.n_children; ++i) {
    const ArrowSchema* child = schema.children[i];
    if (child == nullptr || child->name == nullptr || name != child->name) continue;
    if (c.schema != nullptr) Bad(name, "appears twice in the struct");
    c.schema = child;
    c.array = array.children[i];
  }
  if (c.schema == nullptr) Bad(name, "is not a column of the struct");
  if (c.array == nullptr || c.schema->format == nullptr) Bad(name, "its array is NULL");
  c.first = array.offset;
  return c;
}

using NumberReader = float (*)(const void* data, int64_t k);
template <typename T>
float ReadAs(const void* data, int64_t k) {
  return static_cast<float>(static_cast<const T*>(data)[k]);
}
float ReadBool(const void* data, int64_t k) { return Bit(data, k) ? 1.0f : 0.0f; }

NumberReader ReaderFor(const std::string& name, const char* format, bool ints) {
  const std::string f = format;
  if (f == "f") return ReadAs<float>;
  if (f == "g") return ReadAs<double>;
  if (ints && f == "i") return ReadAs<int32_t>;
  if (ints && f == "l") return ReadAs<int64_t>;
  if (ints && f == "b") return ReadBool;
  Bad(name, "has Arrow format \"", f, "\"; expected ",
      ints ? "float32 (f), float64 (g), int32 (i), int64 (l) or bool (b)"
           : "float32 (f) or float64 (g)");
}

// Rows [0, n) of a number column into out[r * stride].
// Row r goes to out[first + r * stride] (no pointer is formed for an empty batch, whose
// `out` may be null).
void CopyNumbers(const Column& c, int64_t n, float* out, int64_t first, int64_t stride) {
  const NumberReader read = ReaderFor(c.name, c.schema->format, true);
  const ArrowArray& a = *c.array;
  CheckArray(c.name, *c.schema, a, 2, c.first + n);
  for (int64_t r = 0; r < n; ++r) {
    if (IsNull(a, c.first + r)) Bad(c.name, "row ", r, " is null");
    out[first + r * stride] = read(a.buffers[1], a.offset + c.first + r);
  }
}

// A list column and its values child.
struct ListColumn {
  Column list;
  const ArrowSchema* values_schema = nullptr;
  const ArrowArray* values = nullptr;
  bool large = false;  // int64 offsets
};

ListColumn OpenList(const Column& c, int64_t n) {
  ListColumn l;
  l.list = c;
  const std::string f = c.schema->format;
  if (f != "+l" && f != "+L")
    Bad(c.name, "has Arrow format \"", f, "\"; expected a list (+l) or large list (+L)");
  l.large = f == "+L";
  CheckArray(c.name, *c.schema, *c.array, 2, c.first + n);
  if (c.schema->n_children != 1 || c.array->n_children != 1 || c.schema->children == nullptr ||
      c.array->children == nullptr || c.schema->children[0] == nullptr ||
      c.array->children[0] == nullptr || c.schema->children[0]->format == nullptr)
    Bad(c.name, "a list needs exactly one child (its values)");
  l.values_schema = c.schema->children[0];
  l.values = c.array->children[0];
  CheckArray(c.name + "'s values", *l.values_schema, *l.values, 2, 0);
  return l;
}

// Row r's bag: logical [begin, end) in the values child; a null list is empty.
std::pair<int64_t, int64_t> Bag(const ListColumn& l, int64_t r) {
  const ArrowArray& a = *l.list.array;
  const int64_t i = a.offset + l.list.first + r;
  if (IsNull(a, l.list.first + r)) return {0, 0};
  const int64_t begin = l.large ? static_cast<const int64_t*>(a.buffers[1])[i]
                                : static_cast<const int32_t*>(a.buffers[1])[i];
  const int64_t end = l.large ? static_cast<const int64_t*>(a.buffers[1])[i + 1]
                              : static_cast<const int32_t*>(a.buffers[1])[i + 1];
  if (begin < 0 || end < begin || end > l.values->length)
    Bad(l.list.name, "row ", r, " has offsets [", begin, ", ", end, ") outside its ",
        l.values->length, " values");
  if (end - begin > std::numeric_limits<int32_t>::max())
    Bad(l.list.name, "row ", r, " has ", end - begin, " ids, more than a bag may hold");
  return {begin, end};
}

// Values [begin, end) of l's values child appended as ids. A null one is an error naming
// its row: r, or where bags are appended at once (r = 0), the row found from the offsets.
template <typename Id>
void AppendBag(const ListColumn& l, int64_t r, int64_t begin, int64_t end,
               std::vector<int64_t>* ids) {
  const ArrowArray& v = *l.values;
  const Id* values = static_cast<const Id*>(v.buffers[1]) + v.offset;
  if (v.null_count != 0 && v.buffers[0] != nullptr)
    for (int64_t k = begin; k < end; ++k)
      if (IsNull(v, k)) {
        while (Bag(l, r).second <= k) ++r;
        Bad(l.list.name, "row ", r, ": id ", k - Bag(l, r).first, " is null");
      }
  ids->insert(ids->end(), values + begin, values + end);
}

// Rows [0, n) of a sparse feature: checks every bag, writes their sizes into lengths[n];
// returns their sum.
int64_t BagLengths(const ListColumn& l, int64_t n, int32_t* lengths) {
  const std::string f = l.values_schema->format;
  if (f != "l" && f != "i")
    Bad(l.list.name, "holds Arrow format \"", f, "\" values; ids are int64 (l) or int32 (i)");
  int64_t total = 0;
  for (int64_t r = 0; r < n; ++r) {
    const auto [begin, end] = Bag(l, r);
    lengths[r] = static_cast<int32_t>(end - begin);
    total += end - begin;
  }
  return total;
}

// Rows [0, n)'s ids appended (BagLengths checked the bags). Where no list is null the
// bags are one contiguous range of the values (offsets never decrease), copied at once.
void AppendIds(const ListColumn& l, int64_t n, int64_t total, std::vector<int64_t>* ids) {
  const bool wide = std::strcmp(l.values_schema->format, "l") == 0;
  const bool null_lists = l.list.array->null_count != 0 && l.list.array->buffers[0] != nullptr;
  if (n > 0 && !null_lists) {
    const int64_t begin = Bag(l, 0).first;
    if (wide) return AppendBag<int64_t>(l, 0, begin, begin + total, ids);
    return AppendBag<int32_t>(l, 0, begin, begin + total, ids);
  }
  for (int64_t r = 0; r < n; ++r) {
    const auto [begin, end] = Bag(l, r);
    if (wide)
      AppendBag<int64_t>(l, r, begin, end, ids);
    else
      AppendBag<int32_t>(l, r, begin, end, ids);
  }
}

// Rows [0, n) of a weights column, whose bags must match the ids' lengths[n].
void AppendWeights(const ListColumn& l, int64_t n, const int32_t* lengths,
                   const std::string& ids_column, std::vector<float>* weights) {
  const NumberReader read = ReaderFor(l.list.name, l.values_schema->format, false);
  const ArrowArray& v = *l.values;
  for (int64_t r = 0; r < n; ++r) {
    const auto [begin, end] = Bag(l, r);
    if (end - begin != lengths[r])
      Bad(l.list.name, "row ", r, " has ", end - begin, " weights but column \"", ids_column,
          "\" has ", lengths[r], " ids");
    for (int64_t k = begin; k < end; ++k) {
      if (IsNull(v, k)) Bad(l.list.name, "row ", r, ": weight ", k - begin, " is null");
      weights->push_back(read(v.buffers[1], v.offset + k));
    }
  }
}

// The top level: a live struct array matching its schema, no null rows.
void CheckStruct(const ArrowSchema& schema, const ArrowArray& array) {
  if (schema.release == nullptr || array.release == nullptr)
    ThrowInvalid("the Arrow schema or array has been released");
  if (schema.format == nullptr || std::strcmp(schema.format, "+s") != 0)
    ThrowInvalid("the Arrow array has format \"", schema.format ? schema.format : "(null)",
                 "\"; expected a struct (+s) of columns, as a record batch exports");
  if (array.n_buffers != 1 || array.buffers == nullptr)
    ThrowInvalid("the Arrow struct has ", array.n_buffers, " buffers; a struct has 1");
  if (array.n_children != schema.n_children ||
      (schema.n_children > 0 && (schema.children == nullptr || array.children == nullptr)))
    ThrowInvalid("the Arrow array has ", array.n_children, " children but its schema has ",
                 schema.n_children);
  if (array.length < 0 || array.length > kMaxBatchSize || array.offset < 0 ||
      array.offset > kMaxOffset)
    ThrowInvalid("the Arrow struct's length ", array.length, " or offset ", array.offset,
                 " is outside [0, ", kMaxBatchSize, "] or [0, 2^48]");
  for (int64_t r = 0; r < array.length; ++r)
    if (IsNull(array, r)) ThrowInvalid("the Arrow struct's row ", r, " is null");
}

void CheckMapping(const ArrowColumns& columns) {
  if (!columns.weights.empty() && columns.weights.size() != columns.sparse.size())
    ThrowInvalid("columns.weights names ", columns.weights.size(), " columns but columns.sparse ",
                 columns.sparse.size(), "; give one per sparse feature (\"\" for none)");
}

void ConvertSparse(const ArrowSchema& schema, const ArrowArray& array, const ArrowColumns& columns,
                   OwnedBatch* b) {
  const int64_t n = b->batch_size;
  const size_t features = columns.sparse.size();
  b->lengths.resize(static_cast<size_t>(n) * features);
  std::vector<ListColumn> lists;
  std::vector<int64_t> totals;
  for (size_t f = 0; f < features; ++f) {
    lists.push_back(OpenList(Find(schema, array, columns.sparse[f]), n));
    totals.push_back(BagLengths(lists[f], n, b->lengths.data() + f * static_cast<size_t>(n)));
  }
  int64_t all = 0;
  for (const int64_t t : totals) all += t;
  b->ids.reserve(static_cast<size_t>(all));  // once: the features' ids are appended in turn
  for (size_t f = 0; f < features; ++f) AppendIds(lists[f], n, totals[f], &b->ids);
}

// The weights of every sparse feature (1 for an unweighted one), when any has a column.
void ConvertWeights(const ArrowSchema& schema, const ArrowArray& array, const ArrowColumns& columns,
                    OwnedBatch* b) {
  bool weighted = false;
  for (const std::string& w : columns.weights) weighted = weighted || !w.empty();
  if (!weighted) return;
  const int64_t n = b->batch_size;
  b->weights.reserve(b->ids.size());
  for (size_t f = 0; f < columns.sparse.size(); ++f) {
    const int32_t* lengths = b->lengths.data() + f * static_cast<size_t>(n);
    if (columns.weights[f].empty()) {
      int64_t count = 0;
      for (int64_t r = 0; r < n; ++r) count += lengths[r];
      b->weights.insert(b->weights.end(), static_cast<size_t>(count), 1.0f);
    } else {
      AppendWeights(OpenList(Find(schema, array, columns.weights[f]), n), n, lengths,
                    columns.sparse[f], &b->weights);
    }
  }
}

}  // namespace

OwnedBatch BatchFromArrow(const ArrowSchema& schema, const ArrowArray& array,
                          const ArrowColumns& columns) {
  CheckMapping(columns);
  CheckStruct(schema, array);
  OwnedBatch b;
  b.batch_size = array.length;
  b.num_dense = static_cast<int32_t>(columns.dense.size());
  b.num_sparse = static_cast<int32_t>(columns.sparse.size());
  b.dense.resize(static_cast<size_t>(b.batch_size) * columns.dense.size());
  for (size_t d = 0; d < columns.dense.size(); ++d)
    CopyNumbers(Find(schema, array, columns.dense[d]), b.batch_size, b.dense.data(),
                static_cast<int64_t>(d), b.num_dense);
  if (!columns.label.empty()) {
    b.labels.resize(static_cast<size_t>(b.batch_size));
    CopyNumbers(Find(schema, array, columns.label), b.batch_size, b.labels.data(), 0, 1);
  }
  ConvertSparse(schema, array, columns, &b);
  ConvertWeights(schema, array, columns, &b);
  return b;
}

}  // namespace dlrm
