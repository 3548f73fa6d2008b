// AVX2 + FMA kernels of the DOT interaction for one sample in float, with dims a multiple
// of 8 (one or more full 8-lane vectors). Callers check CpuHasAvx2Fma() first; the
// portable loops of engine/dense/interaction.cc serve every other case.
//
// z_0 = x [d], z_i = pooled + (i - 1) * d for i in 1..F (the features are contiguous).
// Sums are formed in a fixed lane order, so a result never depends on the thread.
#pragma once

namespace dlrm {

// out[p] = <z_i, z_j> for the pairs (i in 1..F, j < i) in row order: F(F+1)/2 values;
// with self, the pairs (i in 0..F, j <= i): (F+1)(F+2)/2 values.
void DotInteractionForwardAvx2(const float* x, const float* pooled, int num_features, int d,
                               bool self, float* out);

// Given g, the gradient of those outputs: dz_i = sum_j g_(i,j) z_j over j != i (g
// symmetric), plus 2 g_(i,i) z_i with self. dx [d] += dz_0 (dx holds the pass-through
// gradient on entry); dpooled [F * d] = dz_1..F (overwritten). scratch holds (F + 1)^2
// floats.
void DotInteractionBackwardAvx2(const float* x, const float* pooled, const float* g,
                                int num_features, int d, bool self, float* dx, float* dpooled,
                                float* scratch);

}  // namespace dlrm
