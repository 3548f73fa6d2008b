#include "engine/dense/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <mutex>

#include "engine/core/cpu_features.h"
#include "engine/core/status.h"
#include "engine/dense/sgemm_avx512.h"

namespace dlrm {
namespace {

// OpenBLAS takes 32-bit dimensions (blasint); a larger value would silently wrap.
blasint ToBlasInt(int64_t value, const char* name) {
  if (value < 0 || value > std::numeric_limits<blasint>::max()) {
    ThrowInvalid("Gemm: ", name, " must be in [0, ", std::numeric_limits<blasint>::max(), "], got ",
                 value);
  }
  return static_cast<blasint>(value);
}

CBLAS_TRANSPOSE ToBlasTrans(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// Float GEMMs go to the engine's AVX-512 kernel where the CPU has it (sgemm_avx512.h says
// why), to BLAS elsewhere; the choice is made once per process. With a cache, op(B) is
// packed there once (GemmPackCache).
void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, float alpha,
              const float* a, blasint lda, const float* b, blasint ldb, float beta, float* c,
              blasint ldc, GemmPrecision precision, GemmPackCache* b_cache) {
  const bool bf16 = precision == GemmPrecision::kBf16;
  // The model refuses bf16 first where the CPU cannot (CpuGemmPrecision).
  DLRM_INTERNAL_CHECK(!bf16 || (CpuHasAvx512Bf16() && !AmxBf16Refused()));
  if (b_cache != nullptr && (bf16 || CpuHasAvx512())) {
    const uint32_t* packed = b_cache->Packed(b, tb == CblasTrans, n, k, ldb, bf16);
    GemmAvx512PackedB(bf16, ta == CblasTrans, m, n, k, alpha, a, lda, packed, beta, c, ldc);
    return;
  }
  if (bf16) {
    Sbgemm(ta == CblasTrans, tb == CblasTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (CpuHasAvx512()) {
    SgemmAvx512(ta == CblasTrans, tb == CblasTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, double alpha,
              const double* a, blasint lda, const double* b, blasint ldb, double beta, double* c,
              blasint ldc, GemmPrecision precision, GemmPackCache* /*b_cache: float only*/) {
  DLRM_INTERNAL_CHECK(precision == GemmPrecision::kFp32);
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// C = beta * C for an empty inner dimension. BLAS rejects lda/ldb of 0 in that case,
// and beta == 0 must clear C even where it holds NaN (BLAS semantics).
template <typename T>
void ScaleRows(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* row = C + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + N, T(0));
    } else {
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

struct GemmPackCache::Entry {
  // What was packed: the operand's address, shape, transposition and precision.
  struct Key {
    const float* b;
    bool trans_b, bf16;
    int64_t n, k, ldb;
    bool operator==(const Key& o) const {
      return b == o.b && trans_b == o.trans_b && bf16 == o.bf16 && n == o.n && k == o.k &&
             ldb == o.ldb;
    }
  };
  Key key{};
  bool valid = false;
  std::vector<uint32_t> storage;
  uint32_t* words = nullptr;  // 64-byte aligned, inside storage
};

GemmPackCache::GemmPackCache() = default;
GemmPackCache::~GemmPackCache() = default;

void GemmPackCache::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : entries_) e->valid = false;
}

const uint32_t* GemmPackCache::Packed(const float* B, bool trans_b, int64_t N, int64_t K,
                                      int64_t ldb, bool bf16) {
  const Entry::Key key{B, trans_b, bf16, N, K, ldb};
  // Packed under the lock: only the first chunk of a step packs, and the others need the
  // same operands next.
  std::lock_guard<std::mutex> lock(mu_);
  Entry* slot = nullptr;
  for (auto& e : entries_) {
    const bool same = e->key == key;
    if (same && e->valid) return e->words;
    if (same || (slot == nullptr && !e->valid)) slot = e.get();
  }
  if (slot == nullptr) slot = entries_.emplace_back(std::make_unique<Entry>()).get();
  const auto words = static_cast<size_t>(PackedBAvx512Words(bf16, N, K));
  slot->storage.resize(words + 64 / sizeof(uint32_t));
  slot->words = AlignedTo64(slot->storage.data());
  PackBAvx512(bf16, trans_b, N, K, B, ldb, slot->words);
  slot->key = key;
  slot->valid = true;
  return slot->words;
}

void EnsureSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, GemmPrecision precision,
          GemmPackCache* b_cache) {
  EnsureSingleThreadedBlas();
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == T(0)) {  // C = beta * C, however A and B hold inf or NaN
    ScaleRows(M, N, beta, C, ldc);
    return;
  }
  const blasint m = ToBlasInt(M, "M"), n = ToBlasInt(N, "N"), k = ToBlasInt(K, "K");
  const blasint a_ld = ToBlasInt(lda, "lda"), b_ld = ToBlasInt(ldb, "ldb"),
                c_ld = ToBlasInt(ldc, "ldc");
  // Row-major leading dimensions must cover the stored row width, or BLAS reads past rows.
  if (a_ld < (trans_a ? m : k)) ThrowInvalid("Gemm: lda ", lda, " is below the row width");
  if (b_ld < (trans_b ? k : n)) ThrowInvalid("Gemm: ldb ", ldb, " is below the row width");
  if (c_ld < n) ThrowInvalid("Gemm: ldc ", ldc, " is below N ", N);
  BlasGemm(ToBlasTrans(trans_a), ToBlasTrans(trans_b), m, n, k, alpha, A, a_ld, B, b_ld, beta, C,
           c_ld, precision, b_cache);
}

template void Gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t, GemmPrecision,
                          GemmPackCache*);
template void Gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t, GemmPrecision,
                           GemmPackCache*);

}  // namespace dlrm
