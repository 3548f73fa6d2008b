/* A stand-in libdlrm.so.<abi> that reports another ABI version, for AbiMismatchTest: the
 * binding must refuse it at load, naming both versions. Only the functions NativeLoader
 * calls before refusing exist; the JVM binds the rest lazily and never gets to them. */
#include "dlrm/dlrm.h"

int32_t dlrm_abi_version(void) { return DLRM_ABI_VERSION + 1; }

const char* dlrm_version(void) { return "0.0.0-abi-stub"; }
