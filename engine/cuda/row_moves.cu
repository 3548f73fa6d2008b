#include "engine/cuda/device.h"
#include "engine/cuda/row_moves.h"

namespace dlrm::cuda {
namespace {

constexpr int kThreads = 128;

// One block a row (grid-strided), its threads over the row's words.
__global__ void MoveRows(RowMove m, bool gather) {
  for (int64_t i = blockIdx.x; i < m.n; i += gridDim.x) {
    uint16_t* a = m.array + m.rows[i] * m.width;
    uint16_t* p = m.packed + i * m.packed_stride + m.packed_offset;
    for (int64_t w = threadIdx.x; w < m.width; w += blockDim.x) {
      if (gather)
        p[w] = a[w];
      else
        a[w] = p[w];
    }
  }
}

void Launch(const RowMove& move, bool gather, cudaStream_t stream) {
  if (move.n == 0 || move.width == 0) return;
  const auto blocks = static_cast<unsigned>(move.n < 65535 ? move.n : 65535);
  MoveRows<<<blocks, kThreads, 0, stream>>>(move, gather);
  CheckCuda(cudaGetLastError(), gather ? "row gather" : "row scatter");
}

}  // namespace

void LaunchGatherRows(const RowMove& move, cudaStream_t stream) { Launch(move, true, stream); }
void LaunchScatterRows(const RowMove& move, cudaStream_t stream) { Launch(move, false, stream); }

}  // namespace dlrm::cuda
