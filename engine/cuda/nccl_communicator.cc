#include "engine/cuda/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>

#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/shared_library.h"

namespace dlrm::cuda {
namespace {

// NCCL's C ABI (stable since NCCL 2.0), declared here so that the build needs no NCCL
// headers: results and data types are C enums (ints), the unique id is 128 bytes by value.
using NcclResult = int;  // ncclSuccess = 0
using NcclComm = struct ncclComm*;
struct NcclUniqueId {
  char internal[128];
};
constexpr int kNcclUint8 = 1;

struct NcclApi {
  NcclResult (*GetVersion)(int*) = nullptr;
  const char* (*GetErrorString)(NcclResult) = nullptr;
  NcclResult (*GetUniqueId)(NcclUniqueId*) = nullptr;
  NcclResult (*CommInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  NcclResult (*CommDestroy)(NcclComm) = nullptr;
  NcclResult (*AllGather)(const void*, void*, size_t, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*Send)(const void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*Recv)(void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*GroupStart)() = nullptr;
  NcclResult (*GroupEnd)() = nullptr;
  std::string path;
};

bool ResolveAll(void* handle, NcclApi* api, std::string* why) {
  return Resolve(handle, "ncclGetVersion", &api->GetVersion, why) &&
         Resolve(handle, "ncclGetErrorString", &api->GetErrorString, why) &&
         Resolve(handle, "ncclGetUniqueId", &api->GetUniqueId, why) &&
         Resolve(handle, "ncclCommInitRank", &api->CommInitRank, why) &&
         Resolve(handle, "ncclCommDestroy", &api->CommDestroy, why) &&
         Resolve(handle, "ncclAllGather", &api->AllGather, why) &&
         Resolve(handle, "ncclSend", &api->Send, why) &&
         Resolve(handle, "ncclRecv", &api->Recv, why) &&
         Resolve(handle, "ncclGroupStart", &api->GroupStart, why) &&
         Resolve(handle, "ncclGroupEnd", &api->GroupEnd, why);
}

NcclApi OpenApi(const std::vector<std::string>& candidates) {
  NcclApi api;
  api.path = OpenFirst(
      candidates, [&](void* handle, std::string* why) { return ResolveAll(handle, &api, why); },
      "cannot open NCCL (needed by the NCCL communicator; it comes with NVIDIA's nvidia-nccl "
      "wheel or the libnccl2 package: put its lib directory on LD_LIBRARY_PATH).");
  return api;
}

const NcclApi& Nccl() {
  static std::once_flag once;
  static NcclApi api;
  std::call_once(once, [] { api = OpenApi(NcclCandidates()); });
  return api;
}

void Check(const NcclApi& api, NcclResult result, const char* what) {
  if (result != 0)
    Throw(StatusCode::kInternal, what, " failed: ", api.GetErrorString(result), " (", result, ")");
}

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(std::unique_ptr<collective::Communicator> bootstrap, int ordinal)
      : api_(Nccl()),
        bootstrap_(std::move(bootstrap)),
        ordinal_(ordinal),
        device_(OpenDevice(ordinal)) {
    const NcclUniqueId id = SharedId();
    Check(api_, api_.CommInitRank(&comm_, world_size(), id, rank()), "ncclCommInitRank");
  }
  ~NcclCommunicatorImpl() override {
    if (comm_ != nullptr) api_.CommDestroy(comm_);
  }

  int32_t rank() const override { return bootstrap_->rank(); }
  int32_t world_size() const override { return bootstrap_->world_size(); }

  std::vector<std::string> AllGather(const std::string& contribution) override;
  std::vector<std::string> AllToAll(const std::vector<std::string>& to_each) override;
  void AllGatherDevice(const void* send, void* recv, size_t bytes, cudaStream_t stream) override {
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    Check(api_, api_.AllGather(send, recv, bytes, kNcclUint8, comm_, stream), "ncclAllGather");
  }
  void AllToAllDevice(const void* send, void* recv, size_t bytes_per_rank,
                      cudaStream_t stream) override;

 private:
  // NCCL's unique id, made by rank 0 and sent to every rank over the bootstrap.
  NcclUniqueId SharedId();
  // Every rank's `mine` (the same count on every rank), concatenated in rank order.
  std::vector<int64_t> GatherSizes(const std::vector<int64_t>& mine);
  // Bytes [at, at + bytes) of a device array.
  struct Span {
    size_t at = 0, bytes = 0;
  };
  // One NCCL group: sends[p] of `from` goes to rank p, recvs[p] of `to` comes from it
  // (empty spans skipped), ordered on `stream`.
  void SendRecv(const uint8_t* from, const std::vector<Span>& sends, uint8_t* to,
                const std::vector<Span>& recvs, cudaStream_t stream);
  // The spans of parts of `bytes` each, laid end to end.
  static std::vector<Span> Contiguous(const std::vector<size_t>& bytes);
  // kDataLoss unless every entry of the n x n part-size matrix (sizes[from * n + to]) is
  // in [0, 2^40] and the diagonal is 0. Every rank checks the whole matrix, so all of them
  // refuse it together, before any send that the others would wait on forever.
  void CheckPartSizes(const std::vector<int64_t>& sizes) const;

  const NcclApi& api_;
  const std::unique_ptr<collective::Communicator> bootstrap_;
  const int ordinal_;
  const DeviceInfo device_;  // selected before stream_ is made on it
  const Stream stream_;
  NcclComm comm_ = nullptr;
  DeviceBuffer<uint8_t> send_, recv_;
  DeviceBuffer<int64_t> size_send_, size_recv_;
};

NcclUniqueId NcclCommunicatorImpl::SharedId() {
  NcclUniqueId id{};
  std::string mine;
  std::exception_ptr failed;
  if (rank() == 0) {
    try {  // the other ranks wait in the exchange: rank 0 still takes part on failure
      Check(api_, api_.GetUniqueId(&id), "ncclGetUniqueId");
      mine.assign(id.internal, sizeof id.internal);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  const std::vector<std::string> all = bootstrap_->AllGather(mine);
  if (failed) std::rethrow_exception(failed);
  if (all.empty() || all[0].size() != sizeof id.internal)
    Throw(StatusCode::kFailedPrecondition, "NCCL bootstrap: rank 0 sent ",
          all.empty() ? 0 : all[0].size(), " bytes, not a 128-byte NCCL id (it failed to start)");
  std::memcpy(id.internal, all[0].data(), sizeof id.internal);
  return id;
}

std::vector<int64_t> NcclCommunicatorImpl::GatherSizes(const std::vector<int64_t>& mine) {
  const size_t n = static_cast<size_t>(world_size());
  size_send_.Reserve(mine.size());
  size_recv_.Reserve(mine.size() * n);
  size_send_.CopyIn(mine.data(), mine.size(), stream_);
  AllGatherDevice(size_send_.get(), size_recv_.get(), mine.size() * sizeof(int64_t), stream_);
  std::vector<int64_t> sizes(mine.size() * n);
  size_recv_.Download(sizes.data(), sizes.size(), stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return sizes;
}

std::vector<std::string> NcclCommunicatorImpl::AllGather(const std::string& contribution) {
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  const std::vector<int64_t> sizes = GatherSizes({static_cast<int64_t>(contribution.size())});
  // Equal slots of the largest size; each rank reads the first sizes[r] bytes of slot r.
  const auto slot =
      static_cast<size_t>(std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end())));
  const size_t n = sizes.size();
  send_.Reserve(slot);
  recv_.Reserve(slot * n);
  send_.CopyIn(reinterpret_cast<const uint8_t*>(contribution.data()), contribution.size(), stream_);
  AllGatherDevice(send_.get(), recv_.get(), slot, stream_);
  std::vector<uint8_t> host(slot * n);
  recv_.Download(host.data(), host.size(), stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r) {
    if (sizes[r] < 0 || static_cast<size_t>(sizes[r]) > slot)
      Throw(StatusCode::kDataLoss, "NCCL all-gather: rank ", r, " announced ", sizes[r], " bytes");
    out[r].assign(reinterpret_cast<const char*>(host.data() + r * slot),
                  static_cast<size_t>(sizes[r]));
  }
  return out;
}

std::vector<std::string> NcclCommunicatorImpl::AllToAll(const std::vector<std::string>& to_each) {
  const int32_t n = world_size();
  collective::CheckAllToAllParts(to_each, n);
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  std::vector<int64_t> mine(static_cast<size_t>(n));
  for (int32_t p = 0; p < n; ++p)
    mine[p] = p == rank() ? 0 : static_cast<int64_t>(to_each[p].size());
  // sizes[from * n + to]: each rank learns what every peer will send it. A rank's own part
  // never travels: it is handed back as it is.
  const std::vector<int64_t> sizes = GatherSizes(mine);
  CheckPartSizes(sizes);
  std::vector<size_t> send_bytes(n), recv_bytes(n);
  for (int32_t p = 0; p < n; ++p) {
    send_bytes[p] = static_cast<size_t>(mine[p]);
    recv_bytes[p] = static_cast<size_t>(sizes[static_cast<size_t>(p) * n + rank()]);
  }
  const std::vector<Span> sends = Contiguous(send_bytes), recvs = Contiguous(recv_bytes);
  send_.Reserve(std::max<size_t>(1, sends.back().at + sends.back().bytes));
  recv_.Reserve(std::max<size_t>(1, recvs.back().at + recvs.back().bytes));
  for (int32_t p = 0; p < n; ++p)
    if (sends[p].bytes > 0)
      CheckCuda(cudaMemcpyAsync(send_.get() + sends[p].at, to_each[p].data(), sends[p].bytes,
                                cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync (to the device)");
  SendRecv(send_.get(), sends, recv_.get(), recvs, stream_);
  std::vector<char> host(recvs.back().at + recvs.back().bytes);
  recv_.Download(reinterpret_cast<uint8_t*>(host.data()), host.size(), stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  std::vector<std::string> out(static_cast<size_t>(n));
  for (int32_t p = 0; p < n; ++p)
    out[p] = p == rank() ? to_each[p] : std::string(host.data() + recvs[p].at, recvs[p].bytes);
  return out;
}

void NcclCommunicatorImpl::CheckPartSizes(const std::vector<int64_t>& sizes) const {
  constexpr int64_t kMaxPart = int64_t{1} << 40;  // n x 2^40 cannot overflow a sum
  const int32_t n = world_size();
  for (int32_t from = 0; from < n; ++from)
    for (int32_t to = 0; to < n; ++to) {
      const int64_t bytes = sizes[static_cast<size_t>(from) * n + to];
      if (bytes < 0 || bytes > kMaxPart || (from == to && bytes != 0))
        Throw(StatusCode::kDataLoss, "NCCL all-to-all: rank ", from, " announced ", bytes,
              " bytes for rank ", to);
    }
}

void NcclCommunicatorImpl::AllToAllDevice(const void* send, void* recv, size_t bytes_per_rank,
                                          cudaStream_t stream) {
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  const std::vector<Span> blocks =
      Contiguous(std::vector<size_t>(static_cast<size_t>(world_size()), bytes_per_rank));
  SendRecv(static_cast<const uint8_t*>(send), blocks, static_cast<uint8_t*>(recv), blocks, stream);
}

std::vector<NcclCommunicatorImpl::Span> NcclCommunicatorImpl::Contiguous(
    const std::vector<size_t>& bytes) {
  std::vector<Span> spans(bytes.size());
  size_t at = 0;
  for (size_t p = 0; p < bytes.size(); ++p) {
    spans[p] = Span{at, bytes[p]};
    at += bytes[p];
  }
  return spans;
}

void NcclCommunicatorImpl::SendRecv(const uint8_t* from, const std::vector<Span>& sends,
                                    uint8_t* to, const std::vector<Span>& recvs,
                                    cudaStream_t stream) {
  Check(api_, api_.GroupStart(), "ncclGroupStart");
  NcclResult result = 0;
  const char* what = "";
  for (int p = 0; p < world_size() && result == 0; ++p) {
    if (sends[p].bytes > 0) {
      what = "ncclSend";
      result = api_.Send(from + sends[p].at, sends[p].bytes, kNcclUint8, p, comm_, stream);
      if (result != 0) break;
    }
    if (recvs[p].bytes > 0) {
      what = "ncclRecv";
      result = api_.Recv(to + recvs[p].at, recvs[p].bytes, kNcclUint8, p, comm_, stream);
    }
  }
  const NcclResult ended = api_.GroupEnd();  // always closes the group it opened
  Check(api_, result, what);
  Check(api_, ended, "ncclGroupEnd");
}

}  // namespace

std::vector<std::string> NcclCandidates() {
  const std::string name = "libnccl.so.2";
  return {name, "/usr/local/cuda/lib64/" + name, "/usr/local/cuda/lib/" + name};
}

std::string OpenNccl(const std::vector<std::string>& candidates) {
  const NcclApi api = OpenApi(candidates);
  int version = 0;
  Check(api, api.GetVersion(&version), "ncclGetVersion");
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since NCCL 2.9.
  return StrCat(api.path, ", NCCL ", version / 10000, ".", version / 100 % 100, ".", version % 100);
}

std::unique_ptr<NcclCommunicator> MakeNcclCommunicator(
    std::unique_ptr<collective::Communicator> bootstrap, int ordinal) {
  if (!bootstrap) ThrowInvalid("MakeNcclCommunicator: no bootstrap communicator");
  return std::make_unique<NcclCommunicatorImpl>(std::move(bootstrap), ordinal);
}

}  // namespace dlrm::cuda
