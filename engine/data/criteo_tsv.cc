#include "engine/data/criteo_tsv.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "engine/core/status.h"
#include "engine/data/criteo_dense.h"

namespace dlrm {
namespace {

constexpr int kNumDense = CriteoTsvReader::kNumDense;
constexpr int kNumSparse = CriteoTsvReader::kNumSparse;
constexpr int kNumFields = 1 + kNumDense + kNumSparse;

// Field k of a line by its Criteo name: label, I1..I13, C1..C26.
std::string FieldName(int k) {
  if (k == 0) return "label";
  if (k <= kNumDense) return "I" + std::to_string(k);
  return "C" + std::to_string(k - kNumDense);
}

// Error text "<field>: <reason> '<text>'", the text cut short so a garbage line cannot
// make a huge message.
bool Fail(std::string* error, int field, const char* reason, std::string_view text) {
  constexpr size_t kMaxShown = 40;
  if (error != nullptr) {
    std::string msg = FieldName(field);
    msg += ": ";
    msg += reason;
    msg += " '";
    msg.append(text.substr(0, kMaxShown));
    if (text.size() > kMaxShown) msg += "...";
    msg += "'";
    *error = std::move(msg);
  }
  return false;
}

enum class IntResult { kOk, kMalformed, kOutOfRange };

// An optional sign and decimal digits; empty means 0.
IntResult ParseDenseInt(std::string_view s, int64_t* value) {
  *value = 0;
  if (s.empty()) return IntResult::kOk;
  bool negative = false;
  if (s.front() == '-' || s.front() == '+') {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  // from_chars alone would accept a second sign after ours ("--5"), so require a digit.
  if (s.empty() || s.front() < '0' || s.front() > '9') return IntResult::kMalformed;
  uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), magnitude);
  if (ec == std::errc::result_out_of_range) return IntResult::kOutOfRange;
  if (ec != std::errc() || end != s.data() + s.size()) return IntResult::kMalformed;
  if (magnitude > static_cast<uint64_t>(INT64_MAX)) return IntResult::kOutOfRange;
  *value = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
  return IntResult::kOk;
}

// 1 to 16 hex digits, either case.
bool ParseHex64(std::string_view s, uint64_t* value) {
  if (s.empty() || s.size() > 16) return false;
  // from_chars skips no prefix or sign, so a full-length match means hex digits only.
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *value, 16);
  return ec == std::errc() && end == s.data() + s.size();
}

void ValidateOptions(const CriteoOptions& options) {
  if (options.batch_size <= 0)
    ThrowInvalid("CriteoOptions.batch_size must be > 0, got ", options.batch_size);
  if (options.table_rows.size() != static_cast<size_t>(kNumSparse))
    ThrowInvalid("CriteoOptions.table_rows must have ", kNumSparse, " entries, got ",
                 options.table_rows.size());
  for (size_t f = 0; f < options.table_rows.size(); ++f) {
    if (options.table_rows[f] < 0)
      ThrowInvalid("CriteoOptions.table_rows[", f, "] must be > 0 (or kRawIds, 0), got ",
                   options.table_rows[f]);
  }
}

}  // namespace

bool ParseCriteoLine(const std::string& line, const std::vector<int64_t>& table_rows,
                     CriteoRow* row, std::string* error) {
  if (table_rows.size() != static_cast<size_t>(kNumSparse))
    ThrowInvalid("ParseCriteoLine: table_rows must have ", kNumSparse, " entries, got ",
                 table_rows.size());
  std::string_view rest(line);
  if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);  // CRLF files

  const auto tabs = std::count(rest.begin(), rest.end(), '\t');
  if (tabs != kNumFields - 1) {
    if (error != nullptr)
      *error = "line: expected " + std::to_string(kNumFields) + " tab-separated fields, found " +
               std::to_string(tabs + 1);
    return false;
  }

  for (int k = 0; k < kNumFields; ++k) {
    const size_t tab = rest.find('\t');
    const std::string_view field = rest.substr(0, tab);
    rest.remove_prefix(tab == std::string_view::npos ? rest.size() : tab + 1);

    if (k == 0) {
      if (field == "0") {
        row->label = 0.0f;
      } else if (field == "1") {
        row->label = 1.0f;
      } else {
        return Fail(error, k, "expected 0 or 1, got", field);
      }
    } else if (k <= kNumDense) {
      int64_t value = 0;
      switch (ParseDenseInt(field, &value)) {
        case IntResult::kOk: break;
        case IntResult::kMalformed: return Fail(error, k, "not an integer:", field);
        case IntResult::kOutOfRange: return Fail(error, k, "integer out of range:", field);
      }
      row->dense[k - 1] = CriteoDenseValue(value);
    } else {
      const int f = k - 1 - kNumDense;
      if (field.empty()) {
        row->ids[f] = -1;
        row->present[f] = false;
        continue;
      }
      uint64_t value = 0;
      if (!ParseHex64(field, &value)) return Fail(error, k, "not 1 to 16 hex digits:", field);
      const int64_t rows = table_rows[f];
      if (rows < 0)
        ThrowInvalid("ParseCriteoLine: table_rows[", f, "] must be > 0 (or kRawIds), got ", rows);
      row->present[f] = true;
      row->ids[f] = rows == kRawIds ? static_cast<int64_t>(value)
                                    : static_cast<int64_t>(value % static_cast<uint64_t>(rows));
    }
  }
  return true;
}

CriteoTsvReader::CriteoTsvReader(const std::string& path, CriteoOptions options)
    : path_(path), options_(std::move(options)) {
  ValidateOptions(options_);
  // An ifstream "opens" a directory and fails only on the first read; say why up front.
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec))
    Throw(StatusCode::kIo, path_, ": cannot open: ", std::strerror(EISDIR));
  errno = 0;
  in_.open(path_, std::ios::in | std::ios::binary);
  if (!in_.is_open()) {
    const int err = errno;
    Throw(StatusCode::kIo, path_,
          ": cannot open: ", err != 0 ? std::strerror(err) : "unknown error");
  }
}

bool CriteoTsvReader::Next(OwnedBatch* batch) {
  if (batch == nullptr) ThrowInvalid("CriteoTsvReader::Next: batch is null");
  // Rows are collected first because the batch's sparse layout is feature-major, which
  // needs the final row count.
  std::vector<CriteoRow> rows;
  rows.reserve(static_cast<size_t>(std::min<int64_t>(options_.batch_size, 1 << 16)));
  std::string line;
  std::string error;
  CriteoRow row;
  while (static_cast<int64_t>(rows.size()) < options_.batch_size && std::getline(in_, line)) {
    ++lines_read_;
    if (ParseCriteoLine(line, options_.table_rows, &row, &error)) {
      rows.push_back(row);
    } else if (options_.on_malformed == MalformedPolicy::kSkip) {
      ++lines_skipped_;
    } else {
      ThrowInvalid(path_, ":", lines_read_, ": ", error);
    }
  }
  if (in_.bad()) {
    const int err = errno;
    Throw(StatusCode::kIo, path_, ": read error after line ", lines_read_, ": ",
          err != 0 ? std::strerror(err) : "unknown error");
  }

  const int64_t b = static_cast<int64_t>(rows.size());
  batch->batch_size = b;
  batch->num_dense = kNumDense;
  batch->num_sparse = kNumSparse;
  batch->dense.resize(static_cast<size_t>(b * kNumDense));
  batch->labels.resize(static_cast<size_t>(b));
  batch->lengths.resize(static_cast<size_t>(b * kNumSparse));
  batch->ids.clear();
  batch->ids.reserve(static_cast<size_t>(b * kNumSparse));
  batch->weights.clear();
  for (int64_t i = 0; i < b; ++i) {
    batch->labels[i] = rows[i].label;
    std::copy(rows[i].dense, rows[i].dense + kNumDense, batch->dense.begin() + i * kNumDense);
  }
  for (int f = 0; f < kNumSparse; ++f) {
    for (int64_t i = 0; i < b; ++i) {
      const bool present = rows[i].present[f];
      batch->lengths[f * b + i] = present ? 1 : 0;
      if (present) batch->ids.push_back(rows[i].ids[f]);
    }
  }
  return b > 0;
}

}  // namespace dlrm
