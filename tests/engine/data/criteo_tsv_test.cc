#include "engine/data/criteo_tsv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<int64_t> TableRows(int64_t rows = 1000) { return std::vector<int64_t>(26, rows); }

// Fields of a well-formed line whose values depend on k, so lines are distinguishable.
std::vector<std::string> GoodFields(int k) {
  std::vector<std::string> fields;
  fields.push_back(k % 2 == 0 ? "0" : "1");
  for (int j = 0; j < 13; ++j) fields.push_back(std::to_string(k * 13 + j));
  for (int f = 0; f < 26; ++f) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(k * 1000 + f));
    fields.push_back(hex);
  }
  return fields;
}

std::string Join(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i == 0 ? "" : "\t") + fields[i];
  return line;
}

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out << text;
  return path;
}

CriteoOptions Options(int64_t batch_size, MalformedPolicy policy = MalformedPolicy::kError) {
  CriteoOptions options;
  options.batch_size = batch_size;
  options.on_malformed = policy;
  options.table_rows = TableRows();
  return options;
}

float Log1p(double x) { return static_cast<float>(std::log1p(x)); }

TEST(CriteoTsvTest, ParsesHandWrittenLine) {
  std::vector<std::string> fields = GoodFields(0);
  fields[0] = "1";
  fields[1] = "5";          // I1
  fields[2] = "";           // I2: empty -> 0
  fields[3] = "-3";         // I3: negative -> 0
  fields[4] = "0";          // I4
  fields[5] = "+7";         // I5: explicit sign
  fields[13] = "123456";    // I13
  fields[14] = "68fd1e64";  // C1
  fields[15] = "";          // C2: empty bag
  fields[16] = "ABCDEF12";  // C3: uppercase
  fields[17] = "0";         // C4
  fields[39] = "fFfFfFfF";  // C26: mixed case, max value
  std::vector<int64_t> rows = TableRows(1000);
  rows[25] = 7;
  CriteoRow row;
  std::string error;
  ASSERT_TRUE(ParseCriteoLine(Join(fields) + "\r", rows, &row, &error)) << error;
  EXPECT_EQ(row.label, 1.0f);
  EXPECT_EQ(row.dense[0], Log1p(5));
  EXPECT_EQ(row.dense[1], 0.0f);
  EXPECT_EQ(row.dense[2], 0.0f);
  EXPECT_EQ(row.dense[3], 0.0f);
  EXPECT_EQ(row.dense[4], Log1p(7));
  EXPECT_EQ(row.dense[12], Log1p(123456));
  EXPECT_EQ(row.ids[0], 0x68fd1e64LL % 1000);
  EXPECT_EQ(row.ids[1], -1);
  EXPECT_EQ(row.ids[2], 0xABCDEF12LL % 1000);
  EXPECT_EQ(row.ids[3], 0);
  EXPECT_EQ(row.ids[25], 0xFFFFFFFFLL % 7);
}

// A DYNAMIC table's feature (table_rows kRawIds) keeps the whole 64-bit value as its id,
// negative ones included; a FIXED one takes a 16-digit value modulo its rows; 17 digits
// are malformed.
TEST(CriteoTsvTest, RawIdsKeepTheWhole64BitValue) {
  std::vector<std::string> fields = GoodFields(0);
  fields[14] = "ffffffffffffffff";  // C1: raw -> -1, present
  fields[15] = "8000000000000000";  // C2: raw -> INT64_MIN
  fields[16] = "";                  // C3: raw, empty bag
  fields[17] = "0123456789abcdef";  // C4: FIXED, modulo 1000
  std::vector<int64_t> rows = TableRows(1000);
  rows[0] = rows[1] = rows[2] = kRawIds;
  CriteoRow row;
  std::string error;
  ASSERT_TRUE(ParseCriteoLine(Join(fields), rows, &row, &error)) << error;
  EXPECT_TRUE(row.present[0]);
  EXPECT_EQ(row.ids[0], -1);
  EXPECT_EQ(row.ids[1], std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(row.present[2]);
  EXPECT_EQ(row.ids[3], static_cast<int64_t>(0x0123456789abcdefULL % 1000));
  fields[14] = "1ffffffffffffffff";
  EXPECT_FALSE(ParseCriteoLine(Join(fields), rows, &row, &error));
  EXPECT_THAT(error, HasSubstr("not 1 to 16 hex digits"));
}

TEST(CriteoTsvTest, ReaderBuildsFeatureMajorBatch) {
  const std::string dir = testing::TempDir("criteo_layout");
  std::vector<std::string> a = GoodFields(1), b = GoodFields(2);
  a[14] = "";  // C1 of row 0 is an empty bag
  b[15] = "";  // C2 of row 1 is an empty bag
  const std::string path = WriteFile(dir, "day.tsv", Join(a) + "\r\n" + Join(b) + "\n");
  CriteoTsvReader reader(path, Options(8));
  OwnedBatch batch;
  ASSERT_TRUE(reader.Next(&batch));
  EXPECT_EQ(batch.batch_size, 2);
  EXPECT_EQ(batch.num_dense, 13);
  EXPECT_EQ(batch.num_sparse, 26);
  ASSERT_EQ(batch.dense.size(), 26u);
  EXPECT_EQ(batch.dense[0], Log1p(13));        // row 0, I1
  EXPECT_EQ(batch.dense[13 + 12], Log1p(38));  // row 1, I13
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0}));
  ASSERT_EQ(batch.lengths.size(), 52u);
  EXPECT_EQ(batch.lengths[0], 0);  // f0 b0
  EXPECT_EQ(batch.lengths[1], 1);  // f0 b1
  EXPECT_EQ(batch.lengths[2], 1);  // f1 b0
  EXPECT_EQ(batch.lengths[3], 0);  // f1 b1
  ASSERT_EQ(batch.ids.size(), 50u);
  EXPECT_EQ(batch.ids[0], 2000 % 1000);  // f0: only row 1
  EXPECT_EQ(batch.ids[1], 1001 % 1000);  // f1: only row 0
  EXPECT_EQ(batch.ids[2], 1002 % 1000);  // f2 b0
  EXPECT_EQ(batch.ids[3], 2002 % 1000);  // f2 b1
  EXPECT_TRUE(batch.weights.empty());
  EXPECT_FALSE(reader.Next(&batch));
  EXPECT_EQ(reader.lines_read(), 2);
}

TEST(CriteoTsvTest, BatchesAcrossFileEnd) {
  const std::string dir = testing::TempDir("criteo_batches");
  std::string text;
  for (int k = 0; k < 5; ++k) text += Join(GoodFields(k)) + "\n";
  const std::string path = WriteFile(dir, "five.tsv", text);
  CriteoTsvReader reader(path, Options(2));
  OwnedBatch batch;
  std::vector<int64_t> sizes;
  std::vector<float> first_dense;
  while (reader.Next(&batch)) {
    sizes.push_back(batch.batch_size);
    EXPECT_EQ(batch.labels.size(), static_cast<size_t>(batch.batch_size));
    EXPECT_EQ(batch.lengths.size(), static_cast<size_t>(26 * batch.batch_size));
    EXPECT_EQ(batch.ids.size(), static_cast<size_t>(26 * batch.batch_size));
    for (int64_t b = 0; b < batch.batch_size; ++b) first_dense.push_back(batch.dense[b * 13]);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1}));
  ASSERT_EQ(first_dense.size(), 5u);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(first_dense[k], k == 0 ? 0.0f : Log1p(k * 13));
  EXPECT_FALSE(reader.Next(&batch));
  EXPECT_EQ(reader.lines_read(), 5);
  EXPECT_EQ(reader.lines_skipped(), 0);
}

TEST(CriteoTsvTest, LastLineWithoutNewlineIsRead) {
  const std::string dir = testing::TempDir("criteo_no_newline");
  const std::string path =
      WriteFile(dir, "a.tsv", Join(GoodFields(1)) + "\n" + Join(GoodFields(2)));
  CriteoTsvReader reader(path, Options(10));
  OwnedBatch batch;
  ASSERT_TRUE(reader.Next(&batch));
  EXPECT_EQ(batch.batch_size, 2);
}

TEST(CriteoTsvTest, EmptyFileHasNoBatches) {
  const std::string dir = testing::TempDir("criteo_empty");
  CriteoTsvReader reader(WriteFile(dir, "empty.tsv", ""), Options(4));
  OwnedBatch batch;
  EXPECT_FALSE(reader.Next(&batch));
  EXPECT_EQ(reader.lines_read(), 0);
}

struct MalformedCase {
  const char* name;
  int field;  // field to replace, or -1 to use `line` as the whole line
  const char* value;
  const char* field_name;  // expected in the message
};

std::string MalformedLine(const MalformedCase& c) {
  std::vector<std::string> fields = GoodFields(7);
  if (c.field >= 0) {
    fields[c.field] = c.value;
    return Join(fields);
  }
  return c.value;
}

const MalformedCase kMalformedCases[] = {
    {"label_two", 0, "2", "label"},
    {"label_empty", 0, "", "label"},
    {"label_float", 0, "1.0", "label"},
    {"dense_letters", 3, "abc", "I3"},
    {"dense_decimal", 1, "1.5", "I1"},
    {"dense_double_sign", 13, "--4", "I13"},
    {"dense_lone_sign", 7, "-", "I7"},
    {"dense_overflow", 2, "99999999999999999999999", "I2"},
    {"dense_space", 4, " 4", "I4"},
    {"categorical_not_hex", 25, "xyz", "C12"},
    {"categorical_seventeen_digits", 39, "12345678901234567", "C26"},
    {"categorical_signed", 14, "-1", "C1"},
    {"categorical_prefix", 20, "0x12", "C7"},
    {"too_few_fields", -1, "1\t2\t3", "fields"},
    {"too_many_fields", -1, nullptr, "found 41"},
    {"empty_line", -1, "", "fields"},
    {"only_cr", -1, "\r", "fields"},
};

std::string CaseLine(const MalformedCase& c) {
  if (c.value == nullptr) return Join(GoodFields(7)) + "\t5";  // 41 fields
  return MalformedLine(c);
}

TEST(CriteoTsvTest, MalformedLineErrorNamesFileLineAndField) {
  const std::string dir = testing::TempDir("criteo_malformed_error");
  for (const MalformedCase& c : kMalformedCases) {
    SCOPED_TRACE(c.name);
    const std::string path =
        WriteFile(dir, std::string(c.name) + ".tsv",
                  Join(GoodFields(1)) + "\n" + CaseLine(c) + "\n" + Join(GoodFields(3)) + "\n");
    CriteoTsvReader reader(path, Options(10));
    OwnedBatch batch;
    try {
      reader.Next(&batch);
      ADD_FAILURE() << "no error for " << c.name;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), AllOf(HasSubstr(path + ":2:"), HasSubstr(c.field_name)));
    }
  }
}

TEST(CriteoTsvTest, MalformedLineSkippedAndCounted) {
  const std::string dir = testing::TempDir("criteo_malformed_skip");
  for (const MalformedCase& c : kMalformedCases) {
    SCOPED_TRACE(c.name);
    const std::string path =
        WriteFile(dir, std::string(c.name) + ".tsv",
                  Join(GoodFields(1)) + "\n" + CaseLine(c) + "\n" + Join(GoodFields(3)) + "\n");
    CriteoTsvReader reader(path, Options(10, MalformedPolicy::kSkip));
    OwnedBatch batch;
    ASSERT_TRUE(reader.Next(&batch));
    EXPECT_EQ(batch.batch_size, 2);
    EXPECT_EQ(batch.dense[0], Log1p(13));       // line 1
    EXPECT_EQ(batch.dense[13], Log1p(3 * 13));  // line 3
    EXPECT_EQ(reader.lines_read(), 3);
    EXPECT_EQ(reader.lines_skipped(), 1);
    EXPECT_FALSE(reader.Next(&batch));
  }
}

TEST(CriteoTsvTest, BlankLineBeforeEofIsMalformed) {
  const std::string dir = testing::TempDir("criteo_blank");
  const std::string path = WriteFile(dir, "blank.tsv", Join(GoodFields(1)) + "\n\n");
  CriteoTsvReader reader(path, Options(10));
  OwnedBatch batch;
  try {
    reader.Next(&batch);
    ADD_FAILURE() << "blank line accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr(":2:"));
  }
}

TEST(CriteoTsvTest, SkipPolicyFillsBatchesPastBadLines) {
  const std::string dir = testing::TempDir("criteo_skip_batches");
  std::string text;
  for (int k = 0; k < 6; ++k) text += Join(GoodFields(k)) + "\n" + "garbage\n";
  CriteoTsvReader reader(WriteFile(dir, "mixed.tsv", text), Options(4, MalformedPolicy::kSkip));
  OwnedBatch batch;
  ASSERT_TRUE(reader.Next(&batch));
  EXPECT_EQ(batch.batch_size, 4);
  ASSERT_TRUE(reader.Next(&batch));
  EXPECT_EQ(batch.batch_size, 2);
  EXPECT_FALSE(reader.Next(&batch));
  EXPECT_EQ(reader.lines_read(), 12);
  EXPECT_EQ(reader.lines_skipped(), 6);
}

TEST(CriteoTsvTest, MissingFileIsIoError) {
  const std::string path = testing::TempDir("criteo_missing") + "/nope.tsv";
  try {
    CriteoTsvReader reader(path, Options(4));
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kIo);
    EXPECT_THAT(e.what(), AllOf(HasSubstr(path), HasSubstr("No such file")));
  }
}

TEST(CriteoTsvTest, DirectoryIsIoError) {
  const std::string dir = testing::TempDir("criteo_dir");
  try {
    CriteoTsvReader reader(dir, Options(4));
    OwnedBatch batch;
    reader.Next(&batch);
    ADD_FAILURE() << "read a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr(dir));
  }
}

TEST(CriteoTsvTest, OptionsValidatedNamingField) {
  const std::string dir = testing::TempDir("criteo_options");
  const std::string path = WriteFile(dir, "a.tsv", Join(GoodFields(1)) + "\n");
  const auto expect_invalid = [&](const CriteoOptions& options, const std::string& field) {
    try {
      CriteoTsvReader reader(path, options);
      ADD_FAILURE() << "accepted bad " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(field));
    }
  };
  CriteoOptions options = Options(0);
  expect_invalid(options, "batch_size");
  options = Options(4);
  options.table_rows.pop_back();
  expect_invalid(options, "table_rows");
  options = Options(4);
  options.table_rows[3] = -1;
  expect_invalid(options, "table_rows[3]");
}

}  // namespace
}  // namespace dlrm
