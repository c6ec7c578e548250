# Every third-party dependency, found once. All come from Debian 12 packages (scripts/setup).
find_package(Threads REQUIRED)
find_package(Boost 1.81.0 EXACT REQUIRED CONFIG)
find_package(absl REQUIRED CONFIG)
find_package(spdlog REQUIRED CONFIG)
find_package(yaml-cpp REQUIRED CONFIG)
find_package(prometheus-cpp REQUIRED CONFIG)
find_package(simdjson REQUIRED CONFIG)
find_package(OpenSSL 3 REQUIRED)  # TLS to the Kubernetes API (libssl-dev)
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# Tokenizers (issue 16): the regex engine Hugging Face's tokenizers uses, and NFC/NFKC.
pkg_check_modules(ONIG REQUIRED IMPORTED_TARGET oniguruma)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
if(KVGATE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(KVGATE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# Asio and Beast are compiled once (common/asio_impl.cc), not in every translation unit.
add_library(kvgate_boost INTERFACE)
target_link_libraries(kvgate_boost INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(kvgate_boost INTERFACE
  BOOST_ASIO_SEPARATE_COMPILATION BOOST_BEAST_SEPARATE_COMPILATION BOOST_JSON_NO_LIB
  BOOST_ASIO_NO_DEPRECATED)

# msgpuck, header-only in use: its tables and out-of-line functions are compiled once, in
# common/msgpuck_impl.cc (kvgate_msgpuck, which carries this include dir); msgpuck's static
# library is not linked. Used by kvevents/ (decoding) and kvgate-sim (encoding).
find_path(MSGPUCK_INCLUDE_DIR msgpuck.h REQUIRED)
add_library(kvgate_msgpuck_headers INTERFACE)
target_include_directories(kvgate_msgpuck_headers INTERFACE ${MSGPUCK_INCLUDE_DIR})

# --- kvgate-sim (issue 5): ZeroMQ (libzmq + header-only cppzmq). ---
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
# Replica sync (router/cluster/): Redis pub/sub and keys through hiredis.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp REQUIRED)
add_library(kvgate_zmq INTERFACE)
target_include_directories(kvgate_zmq INTERFACE ${CPPZMQ_INCLUDE_DIR})
target_link_libraries(kvgate_zmq INTERFACE PkgConfig::ZMQ)
# --- end kvgate-sim ---

# --- transfer engine (issue 12): RDMA / CUDA / HIP detection. ---
include(${CMAKE_CURRENT_LIST_DIR}/kvgate_transfer_deps.cmake)
