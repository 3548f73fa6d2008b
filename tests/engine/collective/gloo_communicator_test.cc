// The Gloo all-gather (DLRM_COLLECTIVE=gloo) against what an all-gather must return, for
// contributions that are empty, fit its slots, outgrow them, and shrink again, with ranks of
// different sizes in one call.
#include "engine/collective/gloo_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

using std::chrono::milliseconds;

// Rank r's contribution to call i: a size that varies by call and rank, bytes that name both.
std::string Contribution(int32_t rank, size_t call) {
  static const size_t kSizes[] = {0, 10, 4087, 4088, 4089, 70000, 70000, 3, 0, 250000, 17};
  const size_t size = kSizes[call] + (call % 2 == 1 ? 1000 * static_cast<size_t>(rank) : 0);
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i)
    bytes[i] = static_cast<char>((i * 31 + call * 7 + static_cast<size_t>(rank) * 13) & 0xff);
  return bytes;
}

TEST(GlooCommunicatorTest, GathersEveryRanksBytesInRankOrderWhateverTheirSizes) {
  if (!collective::GlooAvailable()) GTEST_SKIP() << "built without Gloo (libgloo-dev)";
  constexpr int32_t kRanks = 3;
  constexpr size_t kCalls = 11;
  collective::LocalCommunicatorHub hub(kRanks, milliseconds(20000));
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<collective::Communicator> gloo =
            collective::MakeGlooCommunicator(hub.Rank(r), "127.0.0.1", milliseconds(20000));
        ASSERT_EQ(gloo->rank(), r);
        ASSERT_EQ(gloo->world_size(), kRanks);
        for (size_t call = 0; call < kCalls; ++call) {
          const std::vector<std::string> all = gloo->AllGather(Contribution(r, call));
          ASSERT_EQ(all.size(), static_cast<size_t>(kRanks));
          for (int32_t from = 0; from < kRanks; ++from)
            EXPECT_TRUE(all[from] == Contribution(from, call))
                << "rank " << r << ", call " << call << ": rank " << from << "'s "
                << all[from].size() << " bytes, want " << Contribution(from, call).size();
        }
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int32_t r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(GlooCommunicatorTest, UnreachableHostIsANetworkErrorNamingIt) {
  if (!collective::GlooAvailable()) GTEST_SKIP() << "built without Gloo (libgloo-dev)";
  collective::LocalCommunicatorHub hub(1, milliseconds(2000));
  try {
    collective::MakeGlooCommunicator(hub.Rank(0), "no-such-host.invalid", milliseconds(2000));
    ADD_FAILURE() << "a device on an unresolvable host was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kNetwork);
    EXPECT_NE(std::string(e.what()).find("no-such-host.invalid"), std::string::npos) << e.what();
  }
}

// A trainer whose peer has gone: each all-gather is an error naming it, and the process
// lives (Gloo's writes run under core/sigpipe.h's ScopedSigpipeBlock; a SIGPIPE killed a
// test process in CI once, in a job whose other trainer failed at once).
TEST(GlooCommunicatorTest, APeerThatLeftIsANetworkErrorNamingTheAllGather) {
  if (!collective::GlooAvailable()) GTEST_SKIP() << "built without Gloo (libgloo-dev)";
  collective::LocalCommunicatorHub hub(2, milliseconds(3000));
  std::unique_ptr<collective::Communicator> gone;
  std::thread leaver([&] {
    gone = collective::MakeGlooCommunicator(hub.Rank(1), "127.0.0.1", milliseconds(3000));
  });
  std::unique_ptr<collective::Communicator> gloo =
      collective::MakeGlooCommunicator(hub.Rank(0), "127.0.0.1", milliseconds(3000));
  leaver.join();
  gone.reset();  // rank 1 closes its connections
  std::this_thread::sleep_for(milliseconds(100));
  for (int call = 0; call < 3; ++call) {
    try {
      gloo->AllGather(std::string(size_t{8} << 20, 'x'));  // more than a socket buffer
      ADD_FAILURE() << "an all-gather with a peer that left returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kNetwork) << e.what();
      EXPECT_NE(std::string(e.what()).find("gloo all-gather"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dlrm
