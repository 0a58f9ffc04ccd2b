# deps.cmake - third-party dependencies, all from Debian packages by name:
# libucx-dev, libprotobuf-c-dev + protobuf-c-compiler, libxxhash-dev,
# libjson-c-dev, libcmocka-dev (tests), libmicrohttpd-dev, libssl-dev,
# libibverbs-dev (optional), pkg-config.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
pkg_check_modules(PROTOBUF_C REQUIRED IMPORTED_TARGET libprotobuf-c)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# Debian's libxxhash on x86 also exports XXH3 with run-time dispatch to
# AVX2 or AVX-512 (xxh_x86dispatch.h): the same hash, which spent 22% less
# CPU per byte in a refit on the 16-core GPU host (NOTES.md, issue 17).
# The digest uses it where it compiles and links.
include(CheckSymbolExists)
set(CMAKE_REQUIRED_INCLUDES ${XXHASH_INCLUDE_DIRS})
set(CMAKE_REQUIRED_LIBRARIES ${XXHASH_LINK_LIBRARIES})
check_symbol_exists(XXH3_64bits_withSeed_dispatch "xxh_x86dispatch.h"
                    WST_HAVE_XXH_DISPATCH)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
pkg_check_modules(JSONC REQUIRED IMPORTED_TARGET json-c)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
# The agent's /metrics, /healthz and /readyz.
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
# HMAC-SHA256 of the control channel's handshake and frames (common/auth.c).
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
# RDMA devices and ports (common/topo_verbs.c); optional: without it the
# topology is read from sysfs alone (common/topo_verbs_stub.c).
pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
message(STATUS "wstream: libibverbs cross-check ${IBVERBS_FOUND}")
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

# NCCL is optional like CUDA: common/gpu/nccl_comm.cu builds when nccl.h and
# libnccl are found, nccl_comm_stub.c otherwise. Looked for in NCCL_ROOT
# (cache or environment), next to the CUDA toolkit, then in the system's
# paths (Ubuntu's libnccl-dev: /usr/include, /usr/lib/<arch>). A runtime
# package without the libnccl.so link still counts: libnccl.so.2 is taken.
set(WST_HAVE_NCCL OFF)
if(WST_HAVE_CUDA)
  if(NOT DEFINED NCCL_ROOT AND DEFINED ENV{NCCL_ROOT})
    set(NCCL_ROOT "$ENV{NCCL_ROOT}")
  endif()
  set(NCCL_ROOT "${NCCL_ROOT}" CACHE PATH "NCCL install prefix (optional)")
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda
               PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  if(EXISTS "${NCCL_INCLUDE_DIR}/nccl.h" AND EXISTS "${NCCL_LIBRARY}")
    file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _wst_nccl_defs
         REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    set(_wst_nccl_ver "")
    foreach(part MAJOR MINOR PATCH)
      string(REGEX MATCH "NCCL_${part} +([0-9]+)" _m "${_wst_nccl_defs}")
      list(APPEND _wst_nccl_ver "${CMAKE_MATCH_1}")
    endforeach()
    list(JOIN _wst_nccl_ver . NCCL_VERSION)
    if(NOT TARGET NCCL::nccl)
      add_library(NCCL::nccl UNKNOWN IMPORTED)
      set_target_properties(NCCL::nccl PROPERTIES
        IMPORTED_LOCATION ${NCCL_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR}
        INTERFACE_LINK_LIBRARIES CUDA::cudart)
    endif()
    set(WST_HAVE_NCCL ON)
    message(STATUS "wstream: NCCL mover ON (NCCL ${NCCL_VERSION}: "
                   "${NCCL_INCLUDE_DIR}/nccl.h, ${NCCL_LIBRARY})")
  else()
    message(STATUS "wstream: NCCL mover OFF (nccl.h: ${NCCL_INCLUDE_DIR}, "
                   "libnccl: ${NCCL_LIBRARY}; set NCCL_ROOT to its prefix)")
  endif()
else()
  message(STATUS "wstream: NCCL mover OFF (no CUDA)")
endif()
