// What the CPU the engine runs on can execute, asked once per process.
//
// Kernels with AVX2 + FMA or AVX-512 variants pick them at run time, so one libdlrm.so
// built for baseline x86-64 runs everywhere and uses the wide units where they exist. The
// choice is fixed for the life of the process, so results stay bitwise reproducible on a
// machine; a machine with another ISA level may round differently (as BLAS already does).
//
// DLRM_MAX_ISA caps the choice for the whole process: "avx2" keeps the AVX2 kernels and
// BLAS for the GEMMs, "portable" also the portable loops. A fleet of mixed CPUs can so get
// the same bits everywhere, and a benchmark can measure a kernel against what it replaced.
// Any other value means no cap.
#pragma once

#include <cstdlib>
#include <cstring>

namespace dlrm {

enum class IsaLevel { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// The level DLRM_MAX_ISA allows (kAvx512 when unset or unrecognized).
inline IsaLevel MaxIsaFromEnvironment() {
  const char* value = std::getenv("DLRM_MAX_ISA");
  if (value == nullptr) return IsaLevel::kAvx512;
  if (std::strcmp(value, "portable") == 0) return IsaLevel::kPortable;
  if (std::strcmp(value, "avx2") == 0) return IsaLevel::kAvx2;
  return IsaLevel::kAvx512;
}

// The widest level this CPU (and its OS: GCC's check includes XGETBV) supports, capped by
// DLRM_MAX_ISA.
inline IsaLevel CpuIsaLevel() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const IsaLevel level = [] {
    IsaLevel cpu = IsaLevel::kPortable;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      cpu = __builtin_cpu_supports("avx512f") ? IsaLevel::kAvx512 : IsaLevel::kAvx2;
    }
    const IsaLevel cap = MaxIsaFromEnvironment();
    return static_cast<int>(cap) < static_cast<int>(cpu) ? cap : cpu;
  }();
  return level;
#else
  return IsaLevel::kPortable;
#endif
}

inline bool CpuHasAvx2Fma() { return static_cast<int>(CpuIsaLevel()) >= 1; }
inline bool CpuHasAvx512() { return CpuIsaLevel() == IsaLevel::kAvx512; }

}  // namespace dlrm
