# Feature detection, in one place. Each option prints one status line; the
# result is one generated header, kvt_build.h, of KVT_HAVE_* macros.
# Impossible combinations (ON without the dependency) fail the build here.

include(CheckIncludeFile)
set(KVT_DEP_LIBS "")

function(kvt_require_or_skip opt found what)
  if("${${opt}}" STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${opt}=ON but ${what} was not found")
  endif()
endfunction()

# --- CUDA: the runtime API from C; the toolkit is enough to compile and link.
set(KVT_HAVE_CUDA 0)
if(NOT KVT_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  kvt_require_or_skip(KVT_WITH_CUDA CUDAToolkit_FOUND "the CUDA toolkit")
  if(CUDAToolkit_FOUND)
    set(KVT_HAVE_CUDA 1)
    # Static cudart: a build carried to a GPU machine needs only the driver.
    # KVT_CUDA_MOCK: the stand-in of tests/mock, for the back-end's tests.
    if(KVT_CUDA_MOCK)
      list(APPEND KVT_DEP_LIBS kvtier_cudart_mock)
    else()
      list(APPEND KVT_DEP_LIBS CUDA::cudart_static)
    endif()
  endif()
endif()
if(KVT_CUDA_MOCK AND NOT KVT_HAVE_CUDA)
  message(FATAL_ERROR "KVT_CUDA_MOCK=ON needs the CUDA toolkit's headers (and KVT_WITH_CUDA not OFF)")
endif()
message(STATUS "kvtier: CUDA back-end ${KVT_HAVE_CUDA} (KVT_WITH_CUDA=${KVT_WITH_CUDA}${CUDAToolkit_VERSION_PREFIX}${CUDAToolkit_VERSION})")

# --- liburing
set(KVT_HAVE_URING 0)
if(NOT KVT_WITH_URING STREQUAL "OFF")
  find_path(URING_INCLUDE liburing.h)
  if(KVT_STATIC_DEPS)
    find_library(URING_LIB NAMES liburing.a uring)
  else()
    find_library(URING_LIB NAMES uring)
  endif()
  set(_uring_found FALSE)
  if(URING_INCLUDE AND URING_LIB)
    set(_uring_found TRUE)
  endif()
  kvt_require_or_skip(KVT_WITH_URING _uring_found "liburing (apt-get install liburing-dev)")
  if(_uring_found)
    set(KVT_HAVE_URING 1)
    list(APPEND KVT_DEP_LIBS ${URING_LIB})
  endif()
endif()
message(STATUS "kvtier: io_uring back-end ${KVT_HAVE_URING} (KVT_WITH_URING=${KVT_WITH_URING})")

# --- LMDB and zstd: required (the SSD tier's index and codec).
find_path(LMDB_INCLUDE lmdb.h)
find_path(ZSTD_INCLUDE zstd.h)
if(KVT_STATIC_DEPS)
  find_library(LMDB_LIB NAMES liblmdb.a lmdb)
  find_library(ZSTD_LIB NAMES libzstd.a zstd)
else()
  find_library(LMDB_LIB NAMES lmdb)
  find_library(ZSTD_LIB NAMES zstd)
endif()
if(NOT LMDB_INCLUDE OR NOT LMDB_LIB)
  message(FATAL_ERROR "LMDB not found (apt-get install liblmdb-dev)")
endif()
if(NOT ZSTD_INCLUDE OR NOT ZSTD_LIB)
  message(FATAL_ERROR "zstd not found (apt-get install libzstd-dev)")
endif()
list(APPEND KVT_DEP_LIBS ${LMDB_LIB} ${ZSTD_LIB})
message(STATUS "kvtier: LMDB ${LMDB_LIB}, zstd ${ZSTD_LIB}")

# --- jansson: the command's JSON (traces read, --json written), not the
# library's: libkvtier never links it. Required for the command; pip's build
# (SKBUILD) makes only the library, so there it may be missing.
find_path(JANSSON_INCLUDE jansson.h)
if(KVT_STATIC_DEPS)
  find_library(JANSSON_LIB NAMES libjansson.a jansson)
else()
  find_library(JANSSON_LIB NAMES jansson)
endif()
set(KVT_HAVE_JANSSON 0)
if(JANSSON_INCLUDE AND JANSSON_LIB)
  set(KVT_HAVE_JANSSON 1)
elseif(NOT SKBUILD)
  message(FATAL_ERROR "jansson not found (apt-get install libjansson-dev): the kvtier command needs it")
endif()
message(STATUS "kvtier: jansson ${JANSSON_LIB} (the command's JSON)")

if(KVT_SANITIZE OR KVT_SANITIZE_THREAD)
  set(KVT_SANITIZE_NUM 1)
else()
  set(KVT_SANITIZE_NUM 0)
endif()

file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/generated)
configure_file(${CMAKE_SOURCE_DIR}/cmake/kvt_build.h.in ${CMAKE_BINARY_DIR}/generated/kvt_build.h)
