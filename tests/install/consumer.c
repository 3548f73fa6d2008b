/* A C program built against an installed libdlrm (pkg-config or find_package). */
#include <dlrm/dlrm.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  dlrm_engine* engine = NULL;
  if (dlrm_abi_version() != DLRM_ABI_VERSION) {
    fprintf(stderr, "ABI mismatch: header %d, library %d\n", DLRM_ABI_VERSION,
            (int)dlrm_abi_version());
    return 1;
  }
  if (dlrm_engine_create("model { num_dense_features: 0 }", &engine) != DLRM_INVALID_ARGUMENT ||
      strstr(dlrm_last_error(), "num_dense_features") == NULL) {
    fprintf(stderr, "expected a config error, got: %s\n", dlrm_last_error());
    return 1;
  }
  printf("consumer: libdlrm %s, ABI %d\n", dlrm_version(), (int)dlrm_abi_version());
  return 0;
}
