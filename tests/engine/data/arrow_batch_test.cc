// BatchFromArrow over arrays built by hand to the C Data Interface spec: each type and
// layout it reads (offsets of the struct and of each child, null lists, large lists,
// int32 ids, weights), and every malformed input refused by name with the row at fault.
#include "engine/data/arrow_batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void NoRelease(ArrowSchema*) {}
void NoReleaseArray(ArrowArray*) {}

// One array and its schema over storage it owns (children included).
struct Col {
  std::string format, name;
  std::vector<uint8_t> validity;  // empty: no nulls
  std::vector<char> offsets, values;
  std::vector<std::unique_ptr<Col>> children;
  std::vector<ArrowSchema*> schema_children;
  std::vector<ArrowArray*> array_children;
  const void* buffers[2] = {nullptr, nullptr};
  ArrowSchema schema{};
  ArrowArray array{};

  // Points schema and array at the storage; length elements, offset skipped first.
  Col& Finish(int64_t length, int64_t offset = 0) {
    schema_children.clear();
    array_children.clear();
    for (auto& c : children) {
      schema_children.push_back(&c->schema);
      array_children.push_back(&c->array);
    }
    schema = {format.c_str(),
              name.c_str(),
              nullptr,
              0,
              static_cast<int64_t>(children.size()),
              schema_children.data(),
              nullptr,
              NoRelease,
              nullptr};
    const bool is_struct = format == "+s";
    buffers[0] = validity.empty() ? nullptr : validity.data();
    buffers[1] = !offsets.empty() ? static_cast<const void*>(offsets.data()) : values.data();
    array = {length,
             validity.empty() ? 0 : -1,
             offset,
             is_struct ? 1 : 2,
             static_cast<int64_t>(children.size()),
             buffers,
             array_children.data(),
             nullptr,
             NoReleaseArray,
             nullptr};
    return *this;
  }
};

template <typename T>
std::vector<char> Bytes(const std::vector<T>& v) {
  std::vector<char> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> Validity(const std::vector<bool>& valid) {
  std::vector<uint8_t> bits((valid.size() + 7) / 8, 0);
  for (size_t i = 0; i < valid.size(); ++i)
    if (valid[i]) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  return bits;
}

template <typename T>
std::unique_ptr<Col> Numbers(const std::string& name, const std::string& format,
                             const std::vector<T>& v) {
  auto c = std::make_unique<Col>();
  c->name = name;
  c->format = format;
  c->values = Bytes(v);
  c->Finish(static_cast<int64_t>(v.size()));
  return c;
}

// A list column: offsets (int32 for "+l", int64 for "+L") over a values child.
template <typename Off, typename T>
std::unique_ptr<Col> List(const std::string& name, const std::vector<Off>& offsets,
                          const std::string& value_format, const std::vector<T>& values) {
  auto c = std::make_unique<Col>();
  c->name = name;
  c->format = sizeof(Off) == 8 ? "+L" : "+l";
  c->offsets = Bytes(offsets);
  c->children.push_back(Numbers("item", value_format, values));
  c->Finish(static_cast<int64_t>(offsets.size()) - 1);
  return c;
}

// The struct of a record batch: 4 rows.
struct Table {
  Col root;
  Table() {
    root.format = "+s";
    root.children.push_back(Numbers<float>("x", "f", {0.5f, 1.5f, 2.5f, 3.5f}));
    root.children.push_back(Numbers<double>("y", "g", {10, 11, 12, 13}));
    root.children.push_back(Numbers<int64_t>("click", "l", {1, 0, 1, 0}));
    root.children.push_back(List<int32_t, int64_t>("a", {0, 2, 2, 3, 5}, "l", {7, 8, 9, 1, 2}));
    root.children.push_back(List<int64_t, int32_t>("b", {0, 1, 2, 3, 4}, "i", {4, 3, 2, 1}));
    root.children.push_back(List<int32_t, float>("w", {0, 2, 2, 3, 5}, "f", {0.5f, 1, 2, 3, 4}));
    root.Finish(4);
  }
  Col& column(const std::string& name) {
    for (auto& c : root.children)
      if (c->name == name) return *c;
    throw std::logic_error(name);
  }
  OwnedBatch Convert(const ArrowColumns& columns) {
    root.Finish(root.array.length, root.array.offset);
    return BatchFromArrow(root.schema, root.array, columns);
  }
};

ArrowColumns Mapping() {
  ArrowColumns c;
  c.label = "click";
  c.dense = {"x", "y"};
  c.sparse = {"a", "b"};
  return c;
}

std::string ErrorOf(Table& t, const ArrowColumns& columns) {
  try {
    t.Convert(columns);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    return e.what();
  }
  return "no error";
}

TEST(ArrowBatchTest, ConvertsToTheEngineLayout) {
  Table t;
  const OwnedBatch b = t.Convert(Mapping());
  EXPECT_EQ(b.batch_size, 4);
  EXPECT_EQ(b.num_dense, 2);
  EXPECT_EQ(b.num_sparse, 2);
  EXPECT_THAT(b.dense, ElementsAre(0.5f, 10, 1.5f, 11, 2.5f, 12, 3.5f, 13));  // row-major
  EXPECT_THAT(b.labels, ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(b.lengths, ElementsAre(2, 0, 1, 2, 1, 1, 1, 1));  // feature-major
  EXPECT_THAT(b.ids, ElementsAre(7, 8, 9, 1, 2, 4, 3, 2, 1));
  EXPECT_TRUE(b.weights.empty());
}

// Found by fuzz_arrow (issue 17): a record batch of no rows formed a pointer past the
// empty dense buffer (undefined behaviour under UBSan). It is an empty batch.
TEST(ArrowBatchTest, ARecordBatchOfNoRowsIsAnEmptyBatch) {
  Table t;
  t.root.Finish(0);
  const OwnedBatch b = t.Convert(Mapping());
  EXPECT_EQ(b.batch_size, 0);
  EXPECT_TRUE(b.dense.empty());
  EXPECT_TRUE(b.labels.empty());
  EXPECT_TRUE(b.ids.empty());
}

TEST(ArrowBatchTest, WeightsFollowTheirIdsAndUnweightedFeaturesGetOnes) {
  Table t;
  ArrowColumns m = Mapping();
  m.weights = {"w", ""};
  const OwnedBatch b = t.Convert(m);
  EXPECT_THAT(b.weights, ElementsAre(0.5f, 1, 2, 3, 4, 1, 1, 1, 1));
}

TEST(ArrowBatchTest, NoLabelColumnGivesABatchToPredict) {
  Table t;
  ArrowColumns m = Mapping();
  m.label.clear();
  EXPECT_TRUE(t.Convert(m).labels.empty());
}

TEST(ArrowBatchTest, HonoursTheStructsAndTheChildrensOffsets) {
  Table t;
  t.root.Finish(2, 1);         // rows 1 and 2 of the record batch (a slice)
  t.column("a").Finish(3, 1);  // and "a" itself starts one element later
  const OwnedBatch b = t.Convert(Mapping());
  ASSERT_EQ(b.batch_size, 2);
  EXPECT_THAT(b.dense, ElementsAre(1.5f, 11, 2.5f, 12));
  EXPECT_THAT(b.labels, ElementsAre(0, 1));
  // a's rows 2, 3 (offsets [2,3), [3,5)); b's rows 1, 2.
  EXPECT_THAT(b.lengths, ElementsAre(1, 2, 1, 1));
  EXPECT_THAT(b.ids, ElementsAre(9, 1, 2, 3, 2));
}

TEST(ArrowBatchTest, ANullListIsAnEmptyBag) {
  Table t;
  t.column("a").validity = Validity({true, true, false, true});
  t.column("a").Finish(4);
  const OwnedBatch b = t.Convert(Mapping());
  EXPECT_THAT(b.lengths, ElementsAre(2, 0, 0, 2, 1, 1, 1, 1));
  EXPECT_THAT(b.ids, ElementsAre(7, 8, 1, 2, 4, 3, 2, 1));
}

TEST(ArrowBatchTest, OtherNullsAreRefusedNamingColumnAndRow) {
  Table t;
  t.column("y").validity = Validity({true, true, true, false});
  t.column("y").Finish(4);
  EXPECT_THAT(ErrorOf(t, Mapping()), HasSubstr("Arrow column \"y\": row 3 is null"));
  Table u;
  u.column("a").children[0]->validity = Validity({true, true, true, false, true});
  u.column("a").children[0]->Finish(5);
  EXPECT_THAT(ErrorOf(u, Mapping()), HasSubstr("Arrow column \"a\": row 3: id 0 is null"));
  Table v;
  v.root.validity = Validity({true, false, true, true});
  EXPECT_THAT(ErrorOf(v, Mapping()), HasSubstr("struct's row 1 is null"));
}

TEST(ArrowBatchTest, MissingOrMistypedColumnsAreNamed) {
  Table t;
  ArrowColumns m = Mapping();
  m.dense = {"x", "nope"};
  EXPECT_THAT(ErrorOf(t, m), HasSubstr("\"nope\": is not a column of the struct"));
  m = Mapping();
  m.sparse = {"x", "b"};
  EXPECT_THAT(ErrorOf(t, m), HasSubstr("\"x\": has Arrow format \"f\"; expected a list"));
  m = Mapping();
  m.dense = {"a"};
  EXPECT_THAT(ErrorOf(t, m), HasSubstr("\"a\": has Arrow format \"+l\"; expected float32"));
  m = Mapping();
  m.sparse = {"w", "b"};  // float values are not ids
  EXPECT_THAT(ErrorOf(t, m), HasSubstr("\"w\": holds Arrow format \"f\" values"));
  m = Mapping();
  m.weights = {"w"};
  EXPECT_THAT(ErrorOf(t, m), HasSubstr("columns.weights names 1 columns but columns.sparse 2"));
  m.weights = {"b", ""};  // int ids are not weights
  EXPECT_THAT(ErrorOf(t, m), HasSubstr("\"b\": has Arrow format \"i\"; expected float32"));
}

TEST(ArrowBatchTest, WeightsWithOtherLengthsThanTheirIdsAreRefused) {
  Table t;
  ArrowColumns m = Mapping();
  m.weights = {"", "w"};  // w's bags are a's, not b's
  EXPECT_THAT(ErrorOf(t, m), HasSubstr("\"w\": row 0 has 2 weights but column \"b\" has 1 ids"));
}

TEST(ArrowBatchTest, MalformedArraysAreRefusedBeforeAnyRead) {
  Table t;
  std::vector<int32_t> bad = {0, 2, 9, 3, 5};  // row 1 ends past the 5 values
  t.column("a").offsets = Bytes(bad);
  t.column("a").Finish(4);
  EXPECT_THAT(ErrorOf(t, Mapping()), HasSubstr("\"a\": row 1 has offsets [2, 9) outside"));
  Table u;
  u.column("x").Finish(3);  // shorter than the struct
  EXPECT_THAT(ErrorOf(u, Mapping()), HasSubstr("\"x\": holds 3 values but 4 are needed"));
  Table v;
  v.column("x").values.clear();
  v.column("x").Finish(4);
  v.column("x").buffers[1] = nullptr;
  EXPECT_THAT(ErrorOf(v, Mapping()), HasSubstr("\"x\": buffer 1 is NULL"));
}

TEST(ArrowBatchTest, DictionaryEncodedAndReleasedArraysAreRefused) {
  Table t;
  t.root.Finish(4);
  ArrowSchema dictionary{};
  t.column("y").schema.dictionary = &dictionary;
  try {
    BatchFromArrow(t.root.schema, t.root.array, Mapping());
    ADD_FAILURE() << "accepted a dictionary-encoded column";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("\"y\": is dictionary-encoded; decode it first"));
  }
  t.column("y").schema.dictionary = nullptr;
  t.root.array.release = nullptr;
  try {
    BatchFromArrow(t.root.schema, t.root.array, Mapping());
    ADD_FAILURE() << "accepted a released array";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("has been released"));
  }
}

TEST(ArrowBatchTest, ANonStructOrAStructOffItsSchemaIsRefused) {
  Table t;
  t.root.Finish(4);
  const Col& x = t.column("x");
  EXPECT_THROW(BatchFromArrow(x.schema, x.array, Mapping()), Error);
  try {
    BatchFromArrow(x.schema, x.array, Mapping());
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("format \"f\"; expected a struct (+s)"));
  }
  ArrowArray fewer = t.root.array;
  fewer.n_children = 2;
  try {
    BatchFromArrow(t.root.schema, fewer, Mapping());
    ADD_FAILURE() << "accepted a struct with fewer children than its schema";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("has 2 children but its schema has 6"));
  }
  ArrowArray far = t.root.array;
  far.offset = int64_t{1} << 62;
  EXPECT_THROW(BatchFromArrow(t.root.schema, far, Mapping()), Error);
}

}  // namespace
}  // namespace dlrm
