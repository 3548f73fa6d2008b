# The CUDA backend (engine/cuda), built where nvcc is found: DLRM_CUDA=AUTO (default), ON
# (fail without nvcc) or OFF. Architectures 80 and 90 (A100, H100/H200); every CUDA source
# compiles with warnings as errors under DLRM_WERROR. The CUDA runtime is linked
# statically, so nothing of CUDA is needed to load libdlrm.so or run the CPU engine; the
# sanitizer build leaves CUDA out (its host code would need the sanitizer runtimes).
# Sets DLRM_HAVE_CUDA.

set(DLRM_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (where nvcc is found), ON or OFF")
set_property(CACHE DLRM_CUDA PROPERTY STRINGS AUTO ON OFF)
set(DLRM_HAVE_CUDA OFF)
if(DLRM_SANITIZE OR DLRM_TSAN OR DLRM_CUDA STREQUAL "OFF")
  message(STATUS "CUDA backend: off (DLRM_CUDA=${DLRM_CUDA}, DLRM_SANITIZE=${DLRM_SANITIZE}, "
    "DLRM_TSAN=${DLRM_TSAN})")
  return()
endif()
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(DLRM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DLRM_CUDA=ON but no nvcc was found (set CUDACXX or CMAKE_CUDA_COMPILER)")
  endif()
  message(STATUS "CUDA backend: off (no nvcc found)")
  return()
endif()
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)  # CUDA::cudart_static for the C++ targets that link it
add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
if(DLRM_WERROR)
  add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>"
                      "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>")
endif()
set(DLRM_HAVE_CUDA ON)
message(STATUS "CUDA backend: on (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
