# transfer/ (issue 12): optional hardware paths, each ON by default when its headers are found.
# The GPU runtimes are loaded with dlopen at run time, so only headers are needed to build them;
# libibverbs is linked (Debian's libibverbs-dev), and a host without a NIC just finds no device.

find_path(KVGATE_IBVERBS_INCLUDE_DIR infiniband/verbs.h)
find_library(KVGATE_IBVERBS_LIBRARY ibverbs)
if(KVGATE_IBVERBS_INCLUDE_DIR AND KVGATE_IBVERBS_LIBRARY)
  set(_kvgate_rdma_default ON)
else()
  set(_kvgate_rdma_default OFF)
endif()
option(KVGATE_WITH_RDMA "Build the rdma transport (ibverbs)" ${_kvgate_rdma_default})

find_path(KVGATE_CUDA_INCLUDE_DIR cuda.h
  HINTS $ENV{CUDA_HOME}/include $ENV{CUDA_PATH}/include /usr/local/cuda/include)
if(KVGATE_CUDA_INCLUDE_DIR)
  set(_kvgate_cuda_default ON)
else()
  set(_kvgate_cuda_default OFF)
endif()
option(KVGATE_WITH_CUDA "Build CUDA device-memory support (driver API via dlopen)"
  ${_kvgate_cuda_default})

# HIP through hipcc (ROCm) or, without it, the headers alone (Debian's libamdhip64-dev).
find_program(KVGATE_HIPCC hipcc HINTS $ENV{ROCM_PATH}/bin /opt/rocm/bin)
set(_kvgate_hip_hints /opt/rocm/include $ENV{ROCM_PATH}/include)
if(KVGATE_HIPCC)
  get_filename_component(_kvgate_hip_bin "${KVGATE_HIPCC}" DIRECTORY)
  list(PREPEND _kvgate_hip_hints "${_kvgate_hip_bin}/../include")
endif()
find_path(KVGATE_HIP_INCLUDE_DIR hip/hip_runtime_api.h HINTS ${_kvgate_hip_hints})
if(KVGATE_HIP_INCLUDE_DIR)
  set(_kvgate_hip_default ON)
else()
  set(_kvgate_hip_default OFF)
endif()
option(KVGATE_WITH_HIP "Build HIP device-memory support (runtime via dlopen)" ${_kvgate_hip_default})

add_library(kvgate_transfer_hw INTERFACE)
target_link_libraries(kvgate_transfer_hw INTERFACE ${CMAKE_DL_LIBS})
if(KVGATE_WITH_RDMA)
  target_include_directories(kvgate_transfer_hw INTERFACE ${KVGATE_IBVERBS_INCLUDE_DIR})
  target_link_libraries(kvgate_transfer_hw INTERFACE ${KVGATE_IBVERBS_LIBRARY})
  target_compile_definitions(kvgate_transfer_hw INTERFACE KVGATE_WITH_RDMA=1)
endif()
if(KVGATE_WITH_CUDA)
  # SYSTEM: the toolkit's headers are not ours to warn about.
  target_include_directories(kvgate_transfer_hw SYSTEM INTERFACE ${KVGATE_CUDA_INCLUDE_DIR})
  target_compile_definitions(kvgate_transfer_hw INTERFACE KVGATE_WITH_CUDA=1)
endif()
if(KVGATE_WITH_HIP)
  target_include_directories(kvgate_transfer_hw SYSTEM INTERFACE ${KVGATE_HIP_INCLUDE_DIR})
  target_compile_definitions(kvgate_transfer_hw INTERFACE KVGATE_WITH_HIP=1 __HIP_PLATFORM_AMD__=1)
endif()
message(STATUS "kvgate transfer: rdma=${KVGATE_WITH_RDMA} cuda=${KVGATE_WITH_CUDA} hip=${KVGATE_WITH_HIP}")
