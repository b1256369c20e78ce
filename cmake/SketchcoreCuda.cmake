# CUDA backend switch. SKETCHCORE_CUDA = AUTO | ON | OFF.
# AUTO enables the backend when a CUDA compiler is found AND this machine has a CUDA driver
# (libcuda.so.1): compiling the kernels takes minutes, so a pip install on a machine that
# cannot run them (a CPU box that happens to have nvcc) stays fast. ON builds it whenever
# nvcc exists (wheel builders, compile checks); OFF never looks for a toolkit, so a CPU-only
# build needs none. The backend sources live in src/cuda/ and are compiled into the one
# `sketchcore` library behind the private backend interface.
include(CheckLanguage)

set(SKETCHCORE_WITH_CUDA OFF)
set(_sc_cuda_note "")
if(SKETCHCORE_CUDA STREQUAL "ON" OR SKETCHCORE_CUDA STREQUAL "AUTO")
  check_language(CUDA)
  if(SKETCHCORE_CUDA STREQUAL "AUTO" AND CMAKE_CUDA_COMPILER)
    # The driver library, never the toolkit's link stub (that one is named libcuda.so).
    find_library(SKETCHCORE_CUDA_DRIVER NAMES libcuda.so.1 HINTS /usr/lib/wsl/lib /usr/local/nvidia/lib64)
    if(NOT SKETCHCORE_CUDA_DRIVER)
      set(_sc_cuda_note " (nvcc found but no CUDA driver here; -DSKETCHCORE_CUDA=ON or SKETCHCORE_CUDA=ON builds it anyway)")
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER AND (SKETCHCORE_CUDA STREQUAL "ON" OR SKETCHCORE_CUDA_DRIVER))
    set(SKETCHCORE_WITH_CUDA ON)
  elseif(SKETCHCORE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SKETCHCORE_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or use AUTO/OFF)")
  endif()
elseif(NOT SKETCHCORE_CUDA STREQUAL "OFF")
  message(FATAL_ERROR "SKETCHCORE_CUDA must be AUTO, ON or OFF, got '${SKETCHCORE_CUDA}'")
endif()

if(SKETCHCORE_WITH_CUDA)
  # Default GPU targets, set before enable_language(CUDA), which would otherwise pick the
  # compiler's own default (sm_75 with CUDA 13). -DCMAKE_CUDA_ARCHITECTURES=... or $CUDAARCHS
  # choose others; the release wheels' list is in tools/wheels/variant.py.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # A CUDA wheel (tools/wheels/variant.py: sketchcore-cu13) must be built by its own major version.
  if(DEFINED SKETCHCORE_CUDA_REQUIRE_MAJOR AND
     NOT CMAKE_CUDA_COMPILER_VERSION MATCHES "^${SKETCHCORE_CUDA_REQUIRE_MAJOR}\\.")
    message(FATAL_ERROR "SKETCHCORE_CUDA_REQUIRE_MAJOR: expected a CUDA ${SKETCHCORE_CUDA_REQUIRE_MAJOR} "
                        "compiler, got ${CMAKE_CUDA_COMPILER} version ${CMAKE_CUDA_COMPILER_VERSION}")
  endif()
  set(_sc_cuda_note " (architectures ${CMAKE_CUDA_ARCHITECTURES})")
endif()
message(STATUS "sketchcore: CUDA backend = ${SKETCHCORE_WITH_CUDA}${_sc_cuda_note}")

# Adds the CUDA backend (src/cuda/) to `target` when enabled, else its null stand-in. The CUDA runtime is linked
# statically (it loads the driver itself, so the library still loads on machines without
# one) and cuBLASLt is loaded at run time (src/cuda/cublaslt_api.hpp says why): building
# needs nvcc and nothing else from the toolkit.
function(sketchcore_add_cuda_backend target)
  if(SKETCHCORE_WITH_CUDA)
    find_package(CUDAToolkit REQUIRED)
    target_sources(${target} PRIVATE
      "${PROJECT_SOURCE_DIR}/src/cuda/cublaslt_api.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/cuda_backend.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/cuda_common.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/cuda_sketch.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/device_pool.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/fp8_kernels.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/inner_activation.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/quantized_cuda.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/int8_kernels.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/kernels.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/lt_gemm.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/performer_backward.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/performer_causal_backward.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/performer_cuda.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/performer_forward.cu"
      "${PROJECT_SOURCE_DIR}/src/cuda/sketch_kernels.cu")
    # The loader opens cuBLASLt of the toolkit's major version (libcublasLt.so.<major>).
    target_compile_definitions(${target} PRIVATE SKETCHCORE_WITH_CUDA=1
                               SKETCHCORE_CUDA_MAJOR=${CUDAToolkit_VERSION_MAJOR})
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fvisibility=hidden>)
    target_link_libraries(${target} PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})
    set_target_properties(${target} PROPERTIES CUDA_VISIBILITY_PRESET hidden CUDA_RUNTIME_LIBRARY Static)
  else()
    # detail::cuda_backend() returns null: the core dispatches without any CUDA #if.
    target_sources(${target} PRIVATE "${PROJECT_SOURCE_DIR}/src/cpp/no_cuda_backend.cpp")
  endif()
endfunction()
