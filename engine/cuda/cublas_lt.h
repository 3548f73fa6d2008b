// cuBLASLt, opened at run time (dlopen) the first time a CUDA backend needs it, so that
// libdlrm.so has no load-time dependency on any CUDA library: a CPU machine never needs
// it, and a GPU machine needs only the libcublasLt.so.<major> of the toolkit libdlrm was
// built with (the CUDA toolkit's lib64, or NVIDIA's nvidia-cublas pip wheel), found by the
// dynamic loader's usual search (LD_LIBRARY_PATH, the ld cache) or in /usr/local/cuda/lib64.
//
// Only the entry points the backend calls are resolved; each is checked when the library
// is opened, so a wrong library fails at once, naming the missing symbol.
//
// Errors: kFailedPrecondition naming every file tried and the loader's reason.
// Thread safety: CublasLt() opens the library once (thread-safe) and then hands out the
// same immutable table; cuBLASLt's own rules apply to the calls made through it.
#pragma once

#include <cublasLt.h>

#include <string>
#include <vector>

namespace dlrm::cuda {

struct CublasLtApi {
  decltype(&::cublasLtGetVersion) GetVersion = nullptr;
  decltype(&::cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&::cublasLtCreate) Create = nullptr;
  decltype(&::cublasLtDestroy) Destroy = nullptr;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmul) Matmul = nullptr;

  std::string path;  // the file that was opened
};

// The library's file names, most specific first: libcublasLt.so.<the toolkit's major>.
std::vector<std::string> CublasLtCandidates();

// The process's cuBLASLt, opened on first use.
const CublasLtApi& CublasLt();

// Opens the first of `candidates` that loads and resolves every entry point (for tests
// and for CublasLt). kFailedPrecondition naming each candidate and why it failed.
CublasLtApi OpenCublasLt(const std::vector<std::string>& candidates);

// kInternal naming `what` and cuBLASLt's status string unless status is success.
void CheckCublas(cublasStatus_t status, const char* what);

}  // namespace dlrm::cuda
