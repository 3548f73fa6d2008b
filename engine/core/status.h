// Errors inside the engine. Code throws dlrm::Error; capi/ converts it once into a
// dlrm_status + thread-local message. The numeric codes are the C ABI's codes.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dlrm {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kOutOfRange = 2,
  kIo = 3,
  kNetwork = 4,
  kTimeout = 5,
  kCancelled = 6,
  kInternal = 7,
  kFailedPrecondition = 8,
  kNotFound = 9,
  kDataLoss = 10,
  kResourceExhausted = 11,
};

const char* StatusCodeName(StatusCode code);
// Whether `code` (as it travels: an int in a message header or a rank's outcome) names an
// error, a StatusCode other than kOk. A peer's code is checked with it before it becomes a
// StatusCode, so that no unknown code reaches the C ABI's dlrm_status.
bool IsErrorCode(int code);

class Error : public std::runtime_error {
 public:
  Error(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// Concatenates stream-able pieces: StrCat("field ", name, " < 0").
template <typename... Parts>
std::string StrCat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}

// Builds a message from stream-able pieces: Throw(kInvalidArgument, "field ", name, " < 0").
template <typename... Parts>
[[noreturn]] void Throw(StatusCode code, Parts&&... parts) {
  throw Error(code, StrCat(std::forward<Parts>(parts)...));
}

template <typename... Parts>
[[noreturn]] void ThrowInvalid(Parts&&... parts) {
  Throw(StatusCode::kInvalidArgument, std::forward<Parts>(parts)...);
}

}  // namespace dlrm

// Checks an invariant the engine itself guarantees; failing means a bug, not bad input.
#define DLRM_INTERNAL_CHECK(cond)                                                   \
  do {                                                                              \
    if (!(cond))                                                                    \
      ::dlrm::Throw(::dlrm::StatusCode::kInternal,                                  \
                    "internal check failed: " #cond " at " __FILE__ ":", __LINE__); \
  } while (0)
