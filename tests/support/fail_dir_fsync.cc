// An LD_PRELOAD shim for tests of what a failed directory sync leaves: fsync of the
// directory whose canonical path is $DLRM_TEST_FAIL_FSYNC_DIR fails with EIO; every other
// call is the C library's. With the variable unset or empty nothing changes. A test sees
// whether it is loaded through the marker symbol below (dlsym(RTLD_DEFAULT, ...)).
//
// Threading: any thread; the variable is read at each call.
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {

int dlrm_fail_dir_fsync_loaded = 1;

int fsync(int fd) {
  using Fsync = int (*)(int);
  static const Fsync real = reinterpret_cast<Fsync>(dlsym(RTLD_NEXT, "fsync"));
  const char* target = std::getenv("DLRM_TEST_FAIL_FSYNC_DIR");
  if (target != nullptr && target[0] != '\0') {
    char link[64], path[PATH_MAX];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, path, sizeof path - 1);
    if (n > 0) {
      path[n] = '\0';
      if (std::strcmp(path, target) == 0) {
        errno = EIO;
        return -1;
      }
    }
  }
  return real(fd);
}

}  // extern "C"
