// libFuzzer harness (issue 17): the Arrow import (BatchFromArrow, behind
// dlrm_arrow_batch_create). The input is a recipe for a record batch: a struct array of
// up to 8 columns, each with a name, a format (the supported ones and others), a length,
// an offset, a null count and validity bitmap, a buffer count, maybe a dictionary or a
// released array, and for lists a child with its own format, length and offsets (raw
// bytes or monotonic steps). Every buffer is as long as its column's declared length and
// offset require: the C Data Interface makes the producer vouch for that, and nothing
// can check it. What the recipe chooses (values, offsets, counts, formats, children) the
// import must accept or refuse naming bad input (fuzz_support.h); a batch it accepts must
// then predict on the small model or be refused by batch validation.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/arrow_batch.h"
#include "engine/engine.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/support/test_support.h"

namespace dlrm::fuzz {
namespace {

// The fuzzer's bytes, read front to back; zeros once they run out.
class Recipe {
 public:
  Recipe(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  int64_t Pick(int64_t n) { return Byte() % n; }  // [0, n)
  void Fill(std::vector<uint8_t>* bytes) {
    for (uint8_t& b : *bytes) b = Byte();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

const char* const kNames[] = {"label", "d0", "d1", "d2", "a", "b", "wa", "wb", "x"};
const char* const kFormats[] = {"f", "g", "i", "l", "b", "c", "+l", "+L", "+s", "u", "", "ll"};
const char* const kChildFormats[] = {"l", "i", "f", "g", "c", "+l"};

void NoReleaseSchema(ArrowSchema*) {}
void NoReleaseArray(ArrowArray*) {}

// Bytes per element of a fixed-width format; 0 for the others.
size_t Width(const std::string& format) {
  if (format == "f" || format == "i") return 4;
  if (format == "g" || format == "l") return 8;
  if (format == "c") return 1;
  return 0;
}

// One array and its schema over storage it owns, children included.
struct Column {
  std::string format, name;
  std::vector<std::vector<uint8_t>> storage;
  const void* buffers[3] = {nullptr, nullptr, nullptr};
  std::vector<std::unique_ptr<Column>> children;
  std::vector<ArrowSchema*> schema_children;
  std::vector<ArrowArray*> array_children;
  std::unique_ptr<Column> dictionary;
  ArrowSchema schema{};
  ArrowArray array{};

  const void* Buffer(size_t bytes, Recipe& r) {
    storage.emplace_back(bytes);
    r.Fill(&storage.back());
    return storage.back().data();
  }
  // Offsets for `slots` lists: raw bytes, or steps of 0-3 from 0.
  const void* Offsets(int64_t slots, bool large, Recipe& r) {
    const size_t width = large ? 8 : 4;
    storage.emplace_back(static_cast<size_t>(slots + 1) * width);
    std::vector<uint8_t>& bytes = storage.back();
    if (r.Pick(4) == 3) {
      r.Fill(&bytes);
    } else {
      int64_t at = 0;
      for (int64_t i = 0; i <= slots; ++i, at += r.Pick(4)) {
        const int32_t small = static_cast<int32_t>(at);
        std::memcpy(bytes.data() + i * width, large ? static_cast<const void*>(&at) : &small,
                    width);
      }
    }
    return bytes.data();
  }
};

std::unique_ptr<Column> MakeColumn(Recipe& r, const std::string& format, int depth);

// Fills the column's buffers and children for its format; returns the usual buffer count.
int64_t Populate(Column& c, Recipe& r, int64_t slots, int depth) {
  c.buffers[0] = r.Pick(2) ? c.Buffer(static_cast<size_t>((slots + 7) / 8), r) : nullptr;
  if (const size_t w = Width(c.format)) {
    c.buffers[1] = c.Buffer(static_cast<size_t>(slots) * w, r);
    return 2;
  }
  if (c.format == "b") {
    c.buffers[1] = c.Buffer(static_cast<size_t>((slots + 7) / 8), r);
    return 2;
  }
  if (c.format == "+l" || c.format == "+L") {
    c.buffers[1] = c.Offsets(slots, c.format == "+L", r);
    if (depth < 2 && r.Pick(8) != 7)
      c.children.push_back(MakeColumn(r, kChildFormats[r.Pick(6)], depth + 1));
    return 2;
  }
  if (c.format == "+s") {
    const int64_t n = r.Pick(9);
    for (int64_t i = 0; i < n && depth < 2; ++i)
      c.children.push_back(MakeColumn(r, kFormats[r.Pick(12)], depth + 1));
    return 1;
  }
  c.buffers[1] = c.Offsets(slots, false, r);  // "u" and the unknown ones: offsets + data
  c.buffers[2] = c.Buffer(static_cast<size_t>(r.Pick(16)), r);
  return 3;
}

// Rare events are a recipe byte's last value, so that an exhausted recipe (zeros) builds
// the common case.
void Finish(Column& c, Recipe& r, int64_t length, int64_t offset, int64_t buffers, int depth) {
  for (auto& child : c.children) {
    c.schema_children.push_back(&child->schema);
    c.array_children.push_back(&child->array);
  }
  const bool nullable = c.buffers[0] != nullptr;
  const int64_t null_count = nullable ? static_cast<int64_t>(r.Pick(4)) - 1 : r.Pick(8) == 7;
  const auto n_children = static_cast<int64_t>(c.children.size());
  c.schema = {
      c.format.c_str(), c.name.c_str(),           nullptr, nullable ? ARROW_FLAG_NULLABLE : 0,
      n_children,       c.schema_children.data(), nullptr, NoReleaseSchema,
      nullptr};
  // Usually the format's buffer count; sometimes another (within the 3 allocated).
  const int64_t n_buffers = r.Pick(8) == 7 ? r.Pick(4) : buffers;
  c.array = {length,
             null_count,
             offset,
             n_buffers,
             n_children,
             c.buffers,
             c.array_children.data(),
             nullptr,
             r.Pick(16) == 15 ? nullptr : NoReleaseArray,
             nullptr};
  if (depth < 2 && r.Pick(16) == 15) {  // a dictionary-encoded column
    c.dictionary = MakeColumn(r, "l", 2);
    c.schema.dictionary = &c.dictionary->schema;
    c.array.dictionary = &c.dictionary->array;
  }
}

std::unique_ptr<Column> MakeColumn(Recipe& r, const std::string& format, int depth) {
  auto c = std::make_unique<Column>();
  c->format = format;
  c->name = kNames[r.Pick(9)];
  const int64_t length = r.Pick(depth == 0 ? 13 : 41);
  const int64_t offset = r.Pick(4);
  const int64_t buffers = Populate(*c, r, length + offset, depth);
  Finish(*c, r, length, offset, buffers, depth);
  return c;
}

struct Fixture {
  std::unique_ptr<Engine> engine;
};

Fixture& TheFixture() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->engine = std::make_unique<Engine>(ParseConfigText(testing::SmallConfigText("")));
    return x;
  }();
  return *f;
}

}  // namespace
}  // namespace dlrm::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Seeds: recipes of zeros and of a repeating pattern; coverage does the rest.
  dlrm::fuzz::WriteSeedsIfAsked(argc, argv, [] {
    std::string pattern(512, '\0');
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 37 + 11);
    return std::vector<std::string>{std::string(256, '\0'), pattern};
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlrm::fuzz;
  Recipe r(data, size);
  const std::unique_ptr<Column> batch =
      MakeColumn(r, r.Pick(8) != 7 ? "+s" : kFormats[r.Pick(12)], 0);
  dlrm::ArrowColumns columns;
  columns.label = r.Pick(2) ? "label" : "";
  columns.dense = {"d0", "d1", "d2"};
  columns.sparse = {"a", "b"};
  if (r.Pick(2)) columns.weights = {"wa", r.Pick(2) ? "wb" : ""};
  dlrm::Engine& engine = *TheFixture().engine;
  RefusedOrDone([&] {
    const dlrm::OwnedBatch imported = dlrm::BatchFromArrow(batch->schema, batch->array, columns);
    std::vector<float> out(static_cast<size_t>(imported.batch_size));
    RefusedOrDone(
        [&] { engine.Predict(imported.view(), out.data(), static_cast<int64_t>(out.size())); });
  });
  return 0;
}
