// NCCL (libnccl.so.2, opened at run time like cuBLASLt: shared_library.h) and a
// collective::Communicator over it, for trainers that each drive one GPU.
//
// The communicator keeps the engine's collective contract (communicator.h): AllGather of
// each rank's bytes, every rank receiving all of them in rank order, so sums are still
// formed by each rank in one fixed tree and the bits do not depend on NCCL's ring or tree
// choices. Host bytes go through the device (sizes first, then one NCCL all-gather of
// equal-size slots). AllToAll sends each peer only its part: every rank's part sizes
// first (one small all-gather, checked whole on every rank), then one group of NCCL sends
// and receives; a rank's own part never leaves it (the default over AllGather moved
// world_size times the bytes). For arrays already on the device it adds AllGatherDevice
// (the dense gradient's subtrees) and AllToAllDevice (the pooled embeddings of the Neo
// layout: rank r's block p goes to rank p's block r), both moving bytes without touching
// the host.
//
// Bootstrap: NCCL's unique id travels over a `bootstrap` communicator (the built-in one
// over the transport, or a host's), so no extra rendezvous is needed; it is also what
// guarantees every rank is present before ncclCommInitRank, which would wait forever.
//
// Ownership: the communicator owns its NCCL communicator, stream and staging buffers.
// Threading: one thread at a time, as every Communicator.
// Errors: kFailedPrecondition when NCCL or a device cannot be had (naming every file
// tried, or the runtime's reason); kInternal naming a failed NCCL or CUDA call;
// kInvalidArgument for sizes that do not fit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/collective/communicator.h"

namespace dlrm::cuda {

// Where NCCL is looked for, in order: the loader's search, then the toolkit's directories.
std::vector<std::string> NcclCandidates();
// Opens the first of `candidates` that is an NCCL 2 library and describes it
// ("libnccl.so.2, NCCL 2.28.3"); kFailedPrecondition naming every file tried.
std::string OpenNccl(const std::vector<std::string>& candidates);

class NcclCommunicator : public collective::Communicator {
 public:
  virtual ~NcclCommunicator() = default;
  // recv [world_size() x bytes] = every rank's send [bytes], in rank order (device memory,
  // ordered on `stream`).
  virtual void AllGatherDevice(const void* send, void* recv, size_t bytes, cudaStream_t stream) = 0;
  // send and recv are [world_size() x bytes_per_rank]: block p of send goes to rank p,
  // which receives it as its block rank() (device memory, ordered on `stream`).
  virtual void AllToAllDevice(const void* send, void* recv, size_t bytes_per_rank,
                              cudaStream_t stream) = 0;
};

// A communicator of bootstrap's ranks on CUDA device `ordinal`. Collective over bootstrap.
std::unique_ptr<NcclCommunicator> MakeNcclCommunicator(
    std::unique_ptr<collective::Communicator> bootstrap, int ordinal);

}  // namespace dlrm::cuda
