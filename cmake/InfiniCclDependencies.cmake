# Everything here is a Debian package (README: the install command).
find_package(Threads REQUIRED)
find_package(dlpack REQUIRED)
find_package(gflags REQUIRED)
find_package(glog REQUIRED)
# JSON (nlohmann-json3-dev): header-only, linked privately where JSON is
# read or written, so the installed package does not depend on it.
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv)

if(INFINI_CCL_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(INFINI_CCL_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# The gloo backend is the CPU default and always built.
find_package(Gloo REQUIRED)

# The NCCL backend needs the CUDA runtime and NCCL (in /usr/local/cuda here).
set(INFINI_CCL_HAVE_NCCL OFF)
if(INFINI_CCL_BUILD_NCCL)
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(INFINI_CCL_HAVE_NCCL ON)
    message(STATUS "NCCL backend: on (${NCCL_LIBRARY})")
  else()
    message(STATUS "NCCL backend: off (CUDA toolkit or NCCL not found)")
  endif()
endif()
