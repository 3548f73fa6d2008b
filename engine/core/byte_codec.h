// A flat little-endian byte encoding for messages between ranks (feature updates, the
// trainers' per-step exchange). The reader is a security boundary: every count is checked
// against the bytes present before anything is allocated, and a short or inflated buffer
// is rejected with kDataLoss naming the context and the field.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {

// Whether an index travels in 32 bits: it is in [0, 2^32). The one rule of every id
// encoding (ByteWriter::PutIndices, the servers' LOOKUP payload in ps/messages.h).
inline bool FitsU32(int64_t id) { return static_cast<uint64_t>(id) <= UINT32_MAX; }

class ByteWriter {
 public:
  ByteWriter() = default;
  // Writes into `reuse` (cleared), keeping its capacity: a buffer recycled across steps.
  explicit ByteWriter(std::string reuse) : out_(std::move(reuse)) { out_.clear(); }

  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  // Count, then the elements.
  template <typename T>
  void PutArray(const T* values, size_t count) {
    static_assert(std::is_trivially_copyable_v<T>);
    Put<uint64_t>(count);
    out_.append(reinterpret_cast<const char*>(values), count * sizeof(T));
  }
  template <typename T>
  void PutArray(const std::vector<T>& values) {
    PutArray(values.data(), values.size());
  }
  void PutString(const std::string& s) { PutArray(s.data(), s.size()); }
  // Row ids (or any indices): 32-bit words when every one is in [0, 2^32), else 64-bit;
  // one width byte (4 or 8) says which. Ids of tables below 2^32 rows travel at half the
  // bytes, and the reader gives back the same int64 values either way.
  void PutIndices(const std::vector<int64_t>& ids) {
    const bool narrow = IndicesFitU32(ids);
    Put<uint8_t>(narrow ? 4 : 8);
    if (!narrow) {
      PutArray(ids);
      return;
    }
    Put<uint64_t>(ids.size());
    const size_t at = out_.size();
    out_.resize(at + ids.size() * sizeof(uint32_t));
    char* to = out_.data() + at;
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto word = static_cast<uint32_t>(ids[i]);
      std::memcpy(to + i * sizeof word, &word, sizeof word);
    }
  }
  // The bytes PutIndices(ids) appends.
  static size_t IndicesBytes(const std::vector<int64_t>& ids) {
    return sizeof(uint8_t) + sizeof(uint64_t) +
           ids.size() * (IndicesFitU32(ids) ? sizeof(uint32_t) : sizeof(int64_t));
  }
  // Room for `bytes` in all, so that appending never reallocates (large messages).
  void Reserve(size_t bytes) { out_.reserve(bytes); }

  std::string& bytes() { return out_; }
  std::string Take() && { return std::move(out_); }

 private:
  static bool IndicesFitU32(const std::vector<int64_t>& ids) {
    bool narrow = true;
    for (const int64_t id : ids) narrow &= FitsU32(id);
    return narrow;
  }
  std::string out_;
};

class ByteReader {
 public:
  // `bytes` is borrowed (a string, or a file mapped into memory); `context` starts every
  // error ("feature updates").
  ByteReader(std::string_view bytes, const char* context) : bytes_(bytes), context_(context) {}

  template <typename T>
  T Get(const char* what) {
    T value;
    Need(sizeof(T), what);
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  // Reads a PutArray into out (resized).
  template <typename T>
  void GetArray(const char* what, std::vector<T>* out) {
    const auto count = Get<uint64_t>(what);
    // Checked against the bytes left before allocating: a forged count cannot make us
    // reserve more memory than the message itself occupies.
    if (count > remaining() / sizeof(T))
      Throw(StatusCode::kDataLoss, context_, ": ", what, " claims ", count, " values but only ",
            remaining(), " bytes remain");
    out->resize(static_cast<size_t>(count));
    if (count > 0) std::memcpy(out->data(), bytes_.data() + pos_, count * sizeof(T));
    pos_ += count * sizeof(T);
  }
  template <typename T>
  std::vector<T> GetArray(const char* what) {
    std::vector<T> values;
    GetArray(what, &values);
    return values;
  }
  // Reads a PutIndices into out (resized); kDataLoss for a width other than 4 or 8.
  void GetIndices(const char* what, std::vector<int64_t>* out) {
    const auto width = Get<uint8_t>(what);
    if (width == 8) {
      GetArray(what, out);
      return;
    }
    if (width != 4)
      Throw(StatusCode::kDataLoss, context_, ": ", what, " has index width ",
            static_cast<int>(width), " (4 or 8 expected)");
    const auto count = Get<uint64_t>(what);
    if (count > remaining() / sizeof(uint32_t))
      Throw(StatusCode::kDataLoss, context_, ": ", what, " claims ", count, " values but only ",
            remaining(), " bytes remain");
    out->resize(static_cast<size_t>(count));
    const char* from = bytes_.data() + pos_;
    for (size_t i = 0; i < out->size(); ++i) {
      uint32_t word;
      std::memcpy(&word, from + i * sizeof word, sizeof word);
      (*out)[i] = word;
    }
    pos_ += out->size() * sizeof(uint32_t);
  }
  std::string GetString(const char* what) { return std::string(GetBytes(what)); }
  // A PutString's bytes, borrowed from the reader's input (no copy).
  std::string_view GetBytes(const char* what) {
    const auto count = Get<uint64_t>(what);
    if (count > remaining())
      Throw(StatusCode::kDataLoss, context_, ": ", what, " claims ", count, " bytes but only ",
            remaining(), " remain");
    const std::string_view bytes = bytes_.substr(pos_, static_cast<size_t>(count));
    pos_ += static_cast<size_t>(count);
    return bytes;
  }

  size_t remaining() const { return bytes_.size() - pos_; }
  const char* context() const { return context_; }
  // kDataLoss if bytes are left over.
  void ExpectEnd() const {
    if (remaining() != 0)
      Throw(StatusCode::kDataLoss, context_, ": ", remaining(), " trailing bytes");
  }

 private:
  void Need(size_t n, const char* what) const {
    if (remaining() < n) Throw(StatusCode::kDataLoss, context_, ": truncated in ", what);
  }
  const std::string_view bytes_;
  const char* context_;
  size_t pos_ = 0;
};

}  // namespace dlrm
