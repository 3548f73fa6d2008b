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
#pragma once

#include <cstdlib>
#include <cstring>

namespace dlrm {

enum class IsaLevel { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// "avx512", "avx2" or "portable": what benchmarks print beside their numbers.
inline const char* IsaLevelName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kAvx512: return "avx512";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kPortable: break;
  }
  return "portable";
}

// A level's name (as IsaLevelName spells it) into *level; false (and *level untouched)
// for any other text.
inline bool ParseIsaLevel(const char* name, IsaLevel* level) {
  for (IsaLevel candidate : {IsaLevel::kAvx512, IsaLevel::kAvx2, IsaLevel::kPortable}) {
    if (std::strcmp(name, IsaLevelName(candidate)) == 0) {
      *level = candidate;
      return true;
    }
  }
  return false;
}

// The level DLRM_MAX_ISA allows: kAvx512 (no cap) when unset or not a level's name. The
// library cannot report a bad value from here; `dlrm bench` refuses one by name.
inline IsaLevel MaxIsaFromEnvironment() {
  IsaLevel level = IsaLevel::kAvx512;
  const char* value = std::getenv("DLRM_MAX_ISA");
  if (value != nullptr) ParseIsaLevel(value, &level);
  return level;
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

inline bool CpuHasAvx2Fma() { return CpuIsaLevel() != IsaLevel::kPortable; }
inline bool CpuHasAvx512() { return CpuIsaLevel() == IsaLevel::kAvx512; }

}  // namespace dlrm
