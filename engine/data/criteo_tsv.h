// Reader for the Criteo display-ads TSV format:
//   label \t I1..I13 (integers, may be empty) \t C1..C26 (32-bit hex, may be empty) \n
//
// Dense: an integer x becomes log(1 + x) for x > 0 and 0 otherwise (DLRM reference);
// an empty field is 0. Categorical: 1 to 16 hex digits (Criteo's are 8); the value modulo
// the feature's table size is the id, or for a DYNAMIC table's feature (table_rows
// kRawIds) the 64-bit value itself, as an int64 (`dlrm generate --raw_ids` writes 16
// digits); an empty field is an empty bag (length 0).
//
// Malformed lines (wrong field count, a label other than 0/1, a non-integer dense field,
// a non-hex categorical field) follow MalformedPolicy: kError throws dlrm::Error naming
// the file, line number and field; kSkip drops the line and counts it (lines_skipped()).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/batch.h"

namespace dlrm {

enum class MalformedPolicy { kError, kSkip };

struct CriteoOptions {
  int64_t batch_size = 1024;
  MalformedPolicy on_malformed = MalformedPolicy::kError;
  // Rows of the table each of the 26 categorical features maps into (26 entries, > 0),
  // or kRawIds for a feature whose ids are kept whole (a DYNAMIC table).
  std::vector<int64_t> table_rows;
};
inline constexpr int64_t kRawIds = 0;

// One parsed line: 13 dense values, 26 ids, the label. An empty field has present false
// (and id -1); a raw id may be any int64, -1 included.
struct CriteoRow {
  float label = 0;
  float dense[13] = {};
  int64_t ids[26] = {};
  bool present[26] = {};
};

// Parses one line (without the newline). Returns false and sets *error (naming the field)
// if the line is malformed.
bool ParseCriteoLine(const std::string& line, const std::vector<int64_t>& table_rows,
                     CriteoRow* row, std::string* error);

class CriteoTsvReader {
 public:
  static constexpr int kNumDense = 13;
  static constexpr int kNumSparse = 26;

  // Throws dlrm::Error(kIo) if the file cannot be opened, kInvalidArgument for bad options.
  CriteoTsvReader(const std::string& path, CriteoOptions options);

  // Fills the next batch of up to batch_size rows (num_dense 13, num_sparse 26, bags of
  // length 0 or 1). Returns false once the file is exhausted and no rows remain.
  bool Next(OwnedBatch* batch);

  int64_t lines_read() const { return lines_read_; }
  int64_t lines_skipped() const { return lines_skipped_; }

 private:
  std::string path_;
  CriteoOptions options_;
  std::ifstream in_;
  int64_t lines_read_ = 0;
  int64_t lines_skipped_ = 0;
};

}  // namespace dlrm
