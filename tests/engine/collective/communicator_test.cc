// The trainers' collectives (communicator.h) against what they must return: AllToAll over
// ranks that are threads (the default, built on AllGather) and over the transport
// (NetCommunicator's own), with parts of different sizes per pair of ranks (empty ones
// too), interleaved with all-gathers; parts of the wrong count are refused before anything
// is sent.
#include "engine/collective/communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/collective/net_communicator.h"
#include "engine/core/status.h"
#include "engine/net/context.h"
#include "engine/net/endpoint.h"

namespace dlrm {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr int32_t kRanks = 3;
constexpr size_t kCalls = 5;

// What rank `from` sends rank `to` in call `call`: a size that differs by all three
// (empty for some pairs), bytes that name them.
std::string Part(int32_t from, int32_t to, size_t call) {
  const size_t size = (call * 7 + static_cast<size_t>(from) * 3 + static_cast<size_t>(to)) % 5 *
                      (call == 3 ? 20000 : 11);
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i)
    bytes[i] = static_cast<char>(
        (i * 31 + call * 7 + static_cast<size_t>(from) * 13 + static_cast<size_t>(to) * 5) & 0xff);
  return bytes;
}

// Each rank runs kCalls all-to-alls, an all-gather after each; every result is checked.
void ExpectCollectives(collective::Communicator& comm) {
  const int32_t me = comm.rank();
  for (size_t call = 0; call < kCalls; ++call) {
    std::vector<std::string> to_each;
    for (int32_t to = 0; to < kRanks; ++to) to_each.push_back(Part(me, to, call));
    const std::vector<std::string> got = comm.AllToAll(to_each);
    ASSERT_EQ(got.size(), static_cast<size_t>(kRanks));
    for (int32_t from = 0; from < kRanks; ++from)
      EXPECT_TRUE(got[from] == Part(from, me, call))
          << "rank " << me << ", call " << call << ": from rank " << from << " " << got[from].size()
          << " bytes, want " << Part(from, me, call).size();
    const std::vector<std::string> all = comm.AllGather(std::to_string(me * 100 + call));
    for (int32_t from = 0; from < kRanks; ++from)
      EXPECT_EQ(all[from], std::to_string(from * 100 + call)) << "rank " << me;
  }
}

void RunRanks(const std::function<void(int32_t rank)>& body) {
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int32_t r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(CommunicatorTest, AllToAllOverAllGatherDeliversEachRanksOwnPart) {
  collective::LocalCommunicatorHub hub(kRanks, milliseconds(20000));
  RunRanks([&](int32_t r) {
    std::unique_ptr<collective::Communicator> comm = hub.Rank(r);
    ExpectCollectives(*comm);
  });
}

TEST(CommunicatorTest, NetCommunicatorSendsEachRankItsOwnPart) {
  const net::Context context;
  std::vector<std::unique_ptr<net::Endpoint>> listeners;
  std::vector<std::string> addresses, links;
  for (int32_t r = 0; r < kRanks; ++r) {
    listeners.push_back(std::make_unique<net::Endpoint>(
        context, net::Endpoint::kListen, "tcp://127.0.0.1:*", net::TransportOptions{}, "trainers"));
    addresses.push_back(listeners.back()->address());
    links.push_back("rank-" + std::to_string(r));
  }
  RunRanks([&](int32_t r) {
    net::TransportOptions options;
    options.routing_id = links[r];
    collective::NetCommunicator comm(context, listeners[r].get(), addresses, links, r, options,
                                     milliseconds(20000));
    ExpectCollectives(comm);
    EXPECT_EQ(comm.dropped(), 0);
  });
}

TEST(CommunicatorTest, AllToAllRefusesPartsOfAnotherCountBeforeSending) {
  collective::LocalCommunicatorHub hub(1, milliseconds(100));
  std::unique_ptr<collective::Communicator> comm = hub.Rank(0);
  try {
    comm->AllToAll({"a", "b"});
    ADD_FAILURE() << "two parts for one rank were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("all-to-all: 2 parts for 1 ranks"));
  }
  // Nothing was sent: the next collective is the first.
  EXPECT_EQ(comm->AllToAll({"c"}), std::vector<std::string>{"c"});
}

}  // namespace
}  // namespace dlrm
