// The engine's log: messages reach the sink set last, whole and one at a time, filtered
// by level; kOff silences; a null sink restores stderr.
#include "engine/core/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace dlrm {
namespace {

struct Captured {
  LogLevel level;
  std::string file;
  int line;
  std::string message;
};

class LogTest : public ::testing::Test {
 protected:
  void Capture(LogLevel min_level) {
    SetLogSink(
        [this](LogLevel level, const char* file, int line, const std::string& message) {
          got_.push_back({level, file, line, message});  // serialized by the log
        },
        min_level);
  }
  void TearDown() override { SetLogSink(nullptr, LogLevel::kInfo); }
  std::vector<Captured> got_;
};

TEST_F(LogTest, MessagesAtOrAboveTheThresholdReachTheSink) {
  Capture(LogLevel::kWarning);
  DLRM_LOG(kInfo) << "not this";
  const int line = __LINE__ + 1;
  DLRM_LOG(kWarning) << "server " << 3 << ": dropped";
  DLRM_LOG(kError) << "failed";
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(got_[0].level, LogLevel::kWarning);
  EXPECT_EQ(got_[0].message, "server 3: dropped");
  EXPECT_EQ(got_[0].line, line);
  EXPECT_THAT(got_[0].file, ::testing::EndsWith("log_test.cc"));
  EXPECT_EQ(got_[1].level, LogLevel::kError);
}

TEST_F(LogTest, StreamIsNotEvaluatedBelowTheThreshold) {
  Capture(LogLevel::kError);
  int evaluated = 0;
  DLRM_LOG(kInfo) << (++evaluated);
  EXPECT_EQ(evaluated, 0);
  EXPECT_TRUE(got_.empty());
}

TEST_F(LogTest, OffSilencesEveryLevel) {
  Capture(LogLevel::kOff);
  DLRM_LOG(kError) << "x";
  EXPECT_TRUE(got_.empty());
  EXPECT_FALSE(LogEnabled(LogLevel::kError));
}

TEST_F(LogTest, ConcurrentMessagesArriveWholeAndOneAtATime) {
  Capture(LogLevel::kDebug);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) DLRM_LOG(kDebug) << "thread " << t << " message " << i;
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(got_.size(), 800u);
  for (const Captured& c : got_)
    EXPECT_THAT(c.message, ::testing::MatchesRegex("thread [0-3] message [0-9]+"));
}

TEST_F(LogTest, NullSinkRestoresStderr) {
  Capture(LogLevel::kInfo);
  SetLogSink(nullptr, LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  DLRM_LOG(kWarning) << "to stderr";
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(got_.empty());
  EXPECT_THAT(err, ::testing::StartsWith("[dlrm WARNING engine/core/log_test.cc:"));
  EXPECT_THAT(err, ::testing::EndsWith("] to stderr\n"));
}

}  // namespace
}  // namespace dlrm
