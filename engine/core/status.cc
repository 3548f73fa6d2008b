#include "engine/core/status.h"

#include <cstring>

namespace dlrm {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kIo: return "IO";
    case StatusCode::kNetwork: return "NETWORK";
    case StatusCode::kTimeout: return "TIMEOUT";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
  }
  return "UNKNOWN";
}

bool IsErrorCode(int code) {
  // The switch above is the one list of codes (StatusCode's underlying type is int, so
  // any int converts).
  return code != 0 && std::strcmp(StatusCodeName(static_cast<StatusCode>(code)), "UNKNOWN") != 0;
}

}  // namespace dlrm
