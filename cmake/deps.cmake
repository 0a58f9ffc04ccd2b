# deps.cmake - third-party dependencies, all from Debian packages by name:
# libucx-dev, libprotobuf-c-dev + protobuf-c-compiler, libxxhash-dev,
# libjson-c-dev, libcmocka-dev (tests), pkg-config.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
pkg_check_modules(PROTOBUF_C REQUIRED IMPORTED_TARGET libprotobuf-c)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(JSONC REQUIRED IMPORTED_TARGET json-c)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
find_program(PROTOC_C NAMES protoc-c REQUIRED)

# UCX's pkg-config file names libucp but not libucs, which we call directly.
find_library(UCS_LIBRARY ucs REQUIRED)

set(WST_HAVE_CUDA OFF)
if(NOT WST_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(WST_HAVE_CUDA ON)
  elseif(WST_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WST_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "wstream: CUDA kernels ${WST_HAVE_CUDA}")
