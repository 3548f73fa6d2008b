// What the CPU the engine runs on can execute, asked once per process.
//
// Kernels with AVX2 + FMA or AVX-512 variants pick them at run time, so one libdlrm.so
// built for baseline x86-64 runs everywhere and uses the wide units where they exist. The
// choice is fixed for the life of the process, so results stay bitwise reproducible on a
// machine; a machine with another ISA level may round differently (as BLAS already does).
//
// DLRM_MAX_ISA caps the choice for the whole process: "avx512" keeps the bf16 GEMM off
// AMX's tiles, "avx2" keeps the AVX2 kernels and BLAS for the GEMMs, "portable" also the
// portable loops. A fleet of mixed CPUs can so get the same bits everywhere, and a
// benchmark can measure a kernel against what it replaced.
#pragma once

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cstdlib>
#include <cstring>

#include "engine/core/status.h"

namespace dlrm {

// kAmx: AVX-512 and AMX's bf16 tiles (Intel Sapphire Rapids and later).
enum class IsaLevel { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

// "amx", "avx512", "avx2" or "portable": what benchmarks print beside their numbers.
inline const char* IsaLevelName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kAmx: return "amx";
    case IsaLevel::kAvx512: return "avx512";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kPortable: break;
  }
  return "portable";
}

// A level's name (as IsaLevelName spells it) into *level; false (and *level untouched)
// for any other text.
inline bool ParseIsaLevel(const char* name, IsaLevel* level) {
  for (IsaLevel candidate :
       {IsaLevel::kAmx, IsaLevel::kAvx512, IsaLevel::kAvx2, IsaLevel::kPortable}) {
    if (std::strcmp(name, IsaLevelName(candidate)) == 0) {
      *level = candidate;
      return true;
    }
  }
  return false;
}

// DLRM_MAX_ISA, read in this one place. Unset: no cap. A value that names no level is
// kept with valid = false: the kernels then run uncapped, and CheckMaxIsa refuses it.
struct MaxIsaSetting {
  const char* value = nullptr;  // the variable's text, null when unset
  bool valid = true;
  IsaLevel level = IsaLevel::kAmx;
};

inline MaxIsaSetting ReadMaxIsa() {
  MaxIsaSetting setting;
  setting.value = std::getenv("DLRM_MAX_ISA");
  if (setting.value != nullptr) setting.valid = ParseIsaLevel(setting.value, &setting.level);
  return setting;
}

// kInvalidArgument naming DLRM_MAX_ISA when it is set to no level's name. Every Engine and
// `dlrm bench` call it, so a typo fails loudly instead of silently running uncapped.
inline void CheckMaxIsa() {
  const MaxIsaSetting setting = ReadMaxIsa();
  if (!setting.valid)
    ThrowInvalid("DLRM_MAX_ISA must be amx, avx512, avx2 or portable, got '", setting.value, "'");
}

// Whether the CPU has AMX's tiles and bf16 products (CPUID.7.0:EDX bits 24 and 22) and
// the OS saves their state (XCR0 bits 17 and 18). Linux still has each process ask for
// the tiles before its first use (CpuHasAmxBf16 does).
inline bool CpuOffersAmxBf16() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 22)) == 0) return false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  return (xcr0_lo & kTileState) == kTileState;
#else
  return false;
#endif
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
    if (cpu == IsaLevel::kAvx512 && CpuOffersAmxBf16()) cpu = IsaLevel::kAmx;
    const IsaLevel cap = ReadMaxIsa().level;
    return static_cast<int>(cap) < static_cast<int>(cpu) ? cap : cpu;
  }();
  return level;
#else
  return IsaLevel::kPortable;
#endif
}

inline bool CpuHasAvx2Fma() { return CpuIsaLevel() != IsaLevel::kPortable; }
inline bool CpuHasAvx512() { return CpuIsaLevel() >= IsaLevel::kAvx512; }
// AVX2 kernels that also convert 16-bit floats (F16C: every AVX2 CPU has it, asked
// through cpuid because GCC and clang name it differently in __builtin_cpu_supports).
inline bool CpuHasAvx2F16c() {
#if defined(__x86_64__)
  static const bool f16c = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return CpuHasAvx2Fma() && f16c;
#else
  return false;
#endif
}

// AVX-512 kernels that also multiply bf16 pairs (AVX512-BF16: AMD Zen 4 and later, Intel
// Cooper Lake and Sapphire Rapids and later): the bf16 GEMM (dense/sgemm_avx512.h), which
// also packs its panels with AVX512BW's 16-bit permutes. Every such CPU has BW; a virtual
// CPU may show BF16 without it, and is then refused the bf16 GEMM as a CPU without BF16
// is (device.matmul_precision). Capped with AVX-512 by DLRM_MAX_ISA.
inline bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  static const bool bf16 = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0 &&
           __builtin_cpu_supports("avx512bw");
  }();
  return CpuHasAvx512() && bf16;
#else
  return false;
#endif
}

// The bf16 GEMM on AMX tiles (dense/sgemm_avx512.h): the CPU offers them, DLRM_MAX_ISA
// allows "amx", the CPU has AVX512-BF16 (every AMX CPU does; the kernel packs with it), and
// Linux granted this process the tile state (ARCH_REQ_XCOMP_PERM, asked here once, when a
// model first asks for bf16 GEMMs rather than at load: a process granted it has larger
// signal frames, and Linux refuses it while a thread's alternate signal stack is too small
// for them, or after it has been granted refuses such a stack). Where it is refused,
// AmxBf16Refused says so and the model refuses MEDIUM: the AVX512-BF16 kernel would give
// other bits than the processes granted it (DLRM_MAX_ISA=avx512 asks for that kernel).
inline bool AmxTilesGranted() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

// The CPU offers AMX under DLRM_MAX_ISA's cap, with AVX512-BF16: where the bf16 GEMM runs
// on the tiles once Linux grants them.
inline bool AmxBf16Wanted() { return CpuIsaLevel() == IsaLevel::kAmx && CpuHasAvx512Bf16(); }

inline bool CpuHasAmxBf16() { return AmxBf16Wanted() && AmxTilesGranted(); }

// True where AMX would run the bf16 GEMM but Linux refused this process its tile state.
inline bool AmxBf16Refused() { return AmxBf16Wanted() && !AmxTilesGranted(); }

}  // namespace dlrm
