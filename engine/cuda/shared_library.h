// Opening a shared library of NVIDIA's at run time (dlopen), so that libdlrm.so has no
// load-time dependency on it: a CPU machine never needs cuBLASLt or NCCL, and a GPU
// machine finds them by the dynamic loader's usual search or at the paths given.
//
// Errors: kFailedPrecondition naming every file tried and why each failed (the loader's
// reason, or the first entry point it lacks).
// Thread safety: stateless; a handle it returns is never closed (the resolved pointers
// live as long as the process).
#pragma once

#include <dlfcn.h>

#include <functional>
#include <string>
#include <vector>

namespace dlrm::cuda {

// Resolves `name` in `handle` into `fn`; false, with the reason in *why, if it is missing.
template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn, std::string* why) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) *why = std::string("it has no ") + name;
  return *fn != nullptr;
}

// Opens the first of `candidates` for which resolve(handle, &why) succeeds and returns the
// file opened; otherwise throws kFailedPrecondition: `intro`, then each file and its reason.
std::string OpenFirst(const std::vector<std::string>& candidates,
                      const std::function<bool(void* handle, std::string* why)>& resolve,
                      const std::string& intro);

}  // namespace dlrm::cuda
