# Build helpers in the style of absl_cc_*: one call per library, test or benchmark.

# -Wno-mismatched-new-delete: GCC 12 false positive on Asio coroutine frames.
set(KVGATE_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-mismatched-new-delete)
if(KVGATE_WERROR)
  list(APPEND KVGATE_WARNINGS -Werror)
endif()

# kvgate_cc_library(NAME n SRCS ... HDRS ... DEPS ... [INTERFACE])
function(kvgate_cc_library)
  cmake_parse_arguments(KV "INTERFACE" "NAME" "SRCS;HDRS;DEPS;DEFINES" ${ARGN})
  if(KV_INTERFACE OR NOT KV_SRCS)
    add_library(${KV_NAME} INTERFACE)
    target_include_directories(${KV_NAME} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${KV_NAME} INTERFACE ${KV_DEPS})
    target_compile_definitions(${KV_NAME} INTERFACE ${KV_DEFINES})
  else()
    add_library(${KV_NAME} STATIC ${KV_SRCS} ${KV_HDRS})
    target_include_directories(${KV_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${KV_NAME} PUBLIC ${KV_DEPS})
    target_compile_options(${KV_NAME} PRIVATE ${KVGATE_WARNINGS})
    target_compile_definitions(${KV_NAME} PUBLIC ${KV_DEFINES})
  endif()
endfunction()

# kvgate_cc_test(NAME n SRCS ... DEPS ... [LABELS ...] [RUN_SERIAL])
# RUN_SERIAL: ctest runs these tests alone (timing-sensitive load tests that a CPU-heavy
# neighbour under `ctest -j2` would starve).
function(kvgate_cc_test)
  cmake_parse_arguments(KV "RUN_SERIAL" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${KV_NAME} ${KV_SRCS})
  target_link_libraries(${KV_NAME} PRIVATE ${KV_DEPS} GTest::gmock GTest::gtest_main
                        kvgate_test_log_init)
  target_compile_options(${KV_NAME} PRIVATE ${KVGATE_WARNINGS})
  target_include_directories(${KV_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  # Tests find the binaries and source files through these (also overridable by environment).
  target_compile_definitions(${KV_NAME} PRIVATE
    KVGATE_TEST_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}"
    KVGATE_TEST_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(KV_RUN_SERIAL)
    gtest_discover_tests(${KV_NAME} DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS "${KV_LABELS}" RUN_SERIAL TRUE)
  else()
    gtest_discover_tests(${KV_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${KV_LABELS}")
  endif()
endfunction()

# kvgate_cc_benchmark(NAME n SRCS ... DEPS ...): a Google Benchmark binary that also runs as a
# cheap ctest labelled `bench`.
function(kvgate_cc_benchmark)
  cmake_parse_arguments(KV "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${KV_NAME} ${KV_SRCS})
  target_link_libraries(${KV_NAME} PRIVATE ${KV_DEPS} benchmark::benchmark)
  target_compile_options(${KV_NAME} PRIVATE ${KVGATE_WARNINGS})
  target_include_directories(${KV_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  add_test(NAME ${KV_NAME}_smoke COMMAND ${KV_NAME} --benchmark_min_time=0.01)
  set_tests_properties(${KV_NAME}_smoke PROPERTIES LABELS bench)
endfunction()
