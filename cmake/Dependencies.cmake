# Every dependency comes from a Debian package; when one is missing we stop and name it.
# scripts/install_deps.sh installs exactly these.

function(dlrm_missing what package)
  message(FATAL_ERROR "libdlrm: ${what} not found. Install it with:\n  sudo apt-get install ${package}\n(or run scripts/install_deps.sh)")
endfunction()

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

find_package(Protobuf QUIET)
if(NOT Protobuf_FOUND OR NOT TARGET protobuf::protoc)
  dlrm_missing("Protocol Buffers (library and protoc)" "libprotobuf-dev protobuf-compiler")
endif()

find_package(gflags QUIET)
if(NOT gflags_FOUND)
  dlrm_missing("gflags" "libgflags-dev")
endif()

find_package(glog QUIET)
if(NOT glog_FOUND)
  dlrm_missing("glog" "libgoogle-glog-dev")
endif()

# OpenBLAS: the engine calls it single-threaded and does its own threading over fixed-size
# chunks, which is what keeps results bitwise identical across thread counts.
find_library(OPENBLAS_LIBRARY NAMES openblas)
find_path(CBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread aarch64-linux-gnu/openblas-pthread openblas)
if(NOT OPENBLAS_LIBRARY OR NOT CBLAS_INCLUDE_DIR)
  dlrm_missing("OpenBLAS" "libopenblas-dev")
endif()

# ZeroMQ (C API) carries the messages of multi-process training (engine/net).
find_path(ZMQ_INCLUDE_DIR zmq.h)
find_library(ZMQ_LIBRARY NAMES zmq)
if(NOT ZMQ_INCLUDE_DIR OR NOT ZMQ_LIBRARY)
  dlrm_missing("ZeroMQ" "libzmq3-dev")
endif()

# libsodium: the message tags' keys and nonces (XChaCha20, BLAKE2b; engine/net/auth.h).
# libzmq itself already depends on it.
find_path(SODIUM_INCLUDE_DIR sodium.h)
find_library(SODIUM_LIBRARY NAMES sodium)
if(NOT SODIUM_INCLUDE_DIR OR NOT SODIUM_LIBRARY)
  dlrm_missing("libsodium" "libsodium-dev")
endif()

# OpenSSL's libcrypto: its Poly1305 (AVX2) for the message tags (engine/net/auth.h).
find_package(OpenSSL QUIET COMPONENTS Crypto)
if(NOT OpenSSL_FOUND OR NOT TARGET OpenSSL::Crypto)
  dlrm_missing("OpenSSL's libcrypto" "libssl-dev")
endif()

if(DLRM_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    dlrm_missing("GoogleTest" "libgtest-dev libgmock-dev")
  endif()
endif()
