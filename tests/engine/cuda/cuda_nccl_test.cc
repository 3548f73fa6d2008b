// The NCCL communicator (engine/cuda/nccl_communicator.h): opening NCCL or naming why not
// (no GPU needed), and at world size 1 on a GPU (the lent machines have one) the host
// all-gather and all-to-all, the device all-gather and the device all-to-all. Several ranks need
// several GPUs, which no machine here has; the bytes' order is the same code at any world size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/core/status.h"
#include "engine/cuda/nccl_communicator.h"
#include "tests/support/cuda_support.h"
#include "tests/support/test_support.h"

namespace dlrm::cuda {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

TEST(CudaNcclTest, AMissingLibraryIsNamedWithEveryFileTried) {
  try {
    OpenNccl({"/nonexistent/libnccl.so.2", "libdlrm-no-such-nccl.so"});
    ADD_FAILURE() << "opened a library that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr("cannot open NCCL"));
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/libnccl.so.2"));
    EXPECT_THAT(e.what(), HasSubstr("libdlrm-no-such-nccl.so"));
  }
}

// Where NCCL is installed it opens and reports its version; elsewhere the error names the
// files tried. Either way nothing crashes.
TEST(CudaNcclTest, OpensNcclOrNamesWhyNot) {
  try {
    EXPECT_THAT(OpenNccl(NcclCandidates()), HasSubstr(", NCCL 2."));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr(NcclCandidates()[0]));
  }
}

TEST(CudaNcclTest, WithoutADeviceOrNcclTheCommunicatorNamesTheCause) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a GPU is present (WorksAtWorldSizeOne covers it)";
  collective::LocalCommunicatorHub hub(1, std::chrono::seconds(5));
  try {
    MakeNcclCommunicator(hub.Rank(0), 0);
    ADD_FAILURE() << "made an NCCL communicator without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), AnyOf(HasSubstr("cannot open NCCL"), HasSubstr("CUDA")));
  }
}

TEST(CudaNcclTest, WorksAtWorldSizeOne) {
  SKIP_WITHOUT_GPU();
  collective::LocalCommunicatorHub hub(1, std::chrono::seconds(30));
  std::unique_ptr<NcclCommunicator> comm = MakeNcclCommunicator(hub.Rank(0), 0);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  for (const std::string& bytes :
       {std::string("dense gradient"), std::string(), std::string(100000, '\x7f')}) {
    const std::vector<std::string> all = comm->AllGather(bytes);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0], bytes);
  }
  // The host all-to-all hands a rank's own part back without a copy through NCCL; a
  // wrong part count is refused before anything is sent.
  for (const std::string& part : {std::string("pooled rows"), std::string()}) {
    EXPECT_EQ(comm->AllToAll({part}), std::vector<std::string>{part});
  }
  testing::ExpectError(
      [&] {
        comm->AllToAll({"a", "b"});
      },
      StatusCode::kInvalidArgument, "2 parts for 1 ranks");
  EXPECT_EQ(comm->AllGather("after a refusal"), std::vector<std::string>{"after a refusal"});
  const std::vector<float> values = testing::RandomFloats(1000, 5);
  const testing::DeviceCopy<float> send(values);
  const testing::DeviceCopy<float> gathered(std::vector<float>(1000, 0.0f));
  const testing::DeviceCopy<float> exchanged(std::vector<float>(1000, 0.0f));
  comm->AllGatherDevice(send.get(), gathered.get(), values.size() * sizeof(float), nullptr);
  comm->AllToAllDevice(send.get(), exchanged.get(), values.size() * sizeof(float), nullptr);
  CheckCuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  EXPECT_EQ(gathered.ToHost(), values);
  EXPECT_EQ(exchanged.ToHost(), values);
}

}  // namespace
}  // namespace dlrm::cuda
