// The C boundary's guard (capi/capi_internal.h): every exception becomes its status and a
// message for dlrm_last_error, and recording that message never throws, even where memory
// has run out (an exception escaping an extern "C" function ends the host program).
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#include "capi/capi_internal.h"
#include "engine/core/status.h"

namespace {
thread_local bool fail_allocations = false;  // set: this thread's allocations throw
}  // namespace

// Every allocation of this binary; a thread that set fail_allocations gets bad_alloc.
void* operator new(std::size_t n) {
  if (fail_allocations) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace dlrm::capi {

// As c_api.cc's (this binary does not link the library).
std::string& LastError() {
  thread_local std::string message;
  return message;
}

namespace {

TEST(CapiGuard, EveryExceptionBecomesItsStatusAndMessage) {
  EXPECT_EQ(Guard([] {}), DLRM_OK);
  EXPECT_EQ(Guard([] { ThrowInvalid("batch.ids is NULL"); }), DLRM_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "batch.ids is NULL");
  EXPECT_EQ(Guard([] { throw std::bad_alloc(); }), DLRM_RESOURCE_EXHAUSTED);
  EXPECT_EQ(LastError(), "out of memory");
  EXPECT_EQ(Guard([] { throw std::runtime_error("boom"); }), DLRM_INTERNAL);
  EXPECT_EQ(LastError(), "internal error: boom");
  EXPECT_EQ(Guard([] { throw 7; }), DLRM_INTERNAL);
  EXPECT_EQ(LastError(), "internal error: unknown exception");
}

// An error whose message cannot be copied (memory ran out after it was made) still
// returns its status, with "out of memory" as the message, instead of throwing again from
// inside the guard's handler.
TEST(CapiGuard, AMessageThatCannotBeStoredStillReturnsItsStatus) {
  LastError().clear();
  LastError().shrink_to_fit();
  const auto fails_after_throwing = [](auto make) {
    return Guard([&] {
      const auto error = make();
      fail_allocations = true;
      throw error;
    });
  };
  const dlrm_status invalid = fails_after_throwing(
      [] { return Error(StatusCode::kInvalidArgument, std::string(1000, 'x')); });
  fail_allocations = false;
  EXPECT_EQ(invalid, DLRM_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "out of memory");
  const dlrm_status internal =
      fails_after_throwing([] { return std::runtime_error(std::string(1000, 'y')); });
  fail_allocations = false;
  EXPECT_EQ(internal, DLRM_INTERNAL);
  EXPECT_EQ(LastError(), "out of memory");
}

}  // namespace
}  // namespace dlrm::capi
