// What the CPU the engine runs on can execute, asked once per process.
//
// Kernels with an AVX2 + FMA variant pick it at run time, so one libdlrm.so built for
// baseline x86-64 runs everywhere and uses the wide units where they exist. The choice is
// fixed for the life of the process, so results stay bitwise reproducible on a machine;
// a machine with another ISA level may round differently (as BLAS already does).
#pragma once

namespace dlrm {

inline bool CpuHasAvx2Fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

}  // namespace dlrm
