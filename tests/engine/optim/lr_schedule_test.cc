// LrFactor against values worked out by hand from the LrScheduleConfig formula.
#include "engine/optim/lr_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/core/status.h"

namespace dlrm {
namespace {

// Config floats (end_factor 0.1f) are not exact decimals.
constexpr double kTol = 1e-7;

TEST(LrScheduleTest, DefaultIsConstantOne) {
  const config::LrScheduleConfig schedule;
  EXPECT_EQ(LrFactor(schedule, 0), 1.0);
  EXPECT_EQ(LrFactor(schedule, 1), 1.0);
  EXPECT_EQ(LrFactor(schedule, 1000000), 1.0);
}

TEST(LrScheduleTest, LinearWarmup) {
  config::LrScheduleConfig schedule;
  schedule.set_warmup_steps(4);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 0), 0.25);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 1), 0.5);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 2), 0.75);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 3), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 4), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 50), 1.0);
}

TEST(LrScheduleTest, QuadraticDecayToEndFactor) {
  config::LrScheduleConfig schedule;
  schedule.set_decay_start_step(10);
  schedule.set_decay_steps(20);
  schedule.set_end_factor(0.1f);  // decay_power defaults to 2
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 0), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 9), 1.0);
  EXPECT_NEAR(LrFactor(schedule, 10), 1.0, kTol);      // t = 0
  EXPECT_NEAR(LrFactor(schedule, 15), 0.60625, kTol);  // t = 1/4: 0.1 + 0.9 * 0.5625
  EXPECT_NEAR(LrFactor(schedule, 20), 0.325, kTol);    // t = 1/2: 0.1 + 0.9 * 0.25
  EXPECT_NEAR(LrFactor(schedule, 30), 0.1, kTol);      // t = 1
  EXPECT_NEAR(LrFactor(schedule, 1000), 0.1, kTol);    // clamped at t = 1
}

TEST(LrScheduleTest, LinearDecayToZero) {
  config::LrScheduleConfig schedule;
  schedule.set_decay_steps(8);
  schedule.set_decay_power(1);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 0), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 2), 0.75);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 6), 0.25);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 8), 0.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 9), 0.0);
}

TEST(LrScheduleTest, WarmupThenConstantThenDecay) {
  config::LrScheduleConfig schedule;
  schedule.set_warmup_steps(2);
  schedule.set_decay_start_step(5);
  schedule.set_decay_steps(4);
  schedule.set_decay_power(3);
  schedule.set_end_factor(0.5f);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 0), 0.5);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 1), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 3), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 5), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 7), 0.5625);  // t = 1/2: 0.5 + 0.5 * 0.125
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 9), 0.5);
}

TEST(LrScheduleTest, WarmupTakesPrecedenceOverDecay) {
  // The formula checks warm-up first, even where the decay window has started.
  config::LrScheduleConfig schedule;
  schedule.set_warmup_steps(4);
  schedule.set_decay_steps(4);
  schedule.set_decay_power(1);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 1), 0.5);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 3), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(schedule, 4), 0.0);  // decay reached t = 1 at step 4
}

TEST(LrScheduleTest, RejectsNegativeStep) {
  EXPECT_THROW(LrFactor(config::LrScheduleConfig(), -1), Error);
}

}  // namespace
}  // namespace dlrm
