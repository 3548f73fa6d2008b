#include "engine/cuda/shared_library.h"

#include <sstream>

#include "engine/core/status.h"

namespace dlrm::cuda {

std::string OpenFirst(const std::vector<std::string>& candidates,
                      const std::function<bool(void* handle, std::string* why)>& resolve,
                      const std::string& intro) {
  std::ostringstream tried;
  for (const std::string& file : candidates) {
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string why;
    if (handle == nullptr) {
      const char* error = dlerror();
      why = error != nullptr ? error : "dlopen failed";
    } else if (resolve(handle, &why)) {
      return file;
    } else {
      dlclose(handle);
    }
    tried << "\n  " << file << ": " << why;
  }
  Throw(StatusCode::kFailedPrecondition, intro, " Tried:", tried.str());
}

}  // namespace dlrm::cuda
