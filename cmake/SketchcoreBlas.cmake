# Selects the CBLAS that the CPU backend calls (SKETCHCORE_BLAS) and defines:
#   sketchcore_blas                      INTERFACE target carrying the link line
#   SKETCHCORE_BLAS_INCLUDE_DIR          directory holding cblas.h
#   SKETCHCORE_BLAS_DEFINITIONS          compile definitions for the one file that includes cblas.h
#
# scipy-openblas32: the pinned PyPI wheel (the Python package's default). Its symbols carry a
#                   `scipy_` prefix; it is located through the Python interpreter.
# OpenBLAS:         a system OpenBLAS (FindBLAS with BLA_VENDOR=OpenBLAS), any release with CBLAS
#                   (tested: Debian 12's 0.3.21).
# Generic:          any CBLAS that FindBLAS finds; set SKETCHCORE_BLAS_INCLUDE_DIR if cblas.h is not
#                   on the default include path.
# Batched GEMM (cblas_?gemm_batch_strided) and thread control (openblas_set_num_threads) are
# used when the library exports them (probed below); without them sketchcore loops over the
# matrices and leaves the BLAS's threads alone.

add_library(sketchcore_blas INTERFACE)
set(SKETCHCORE_BLAS_DEFINITIONS "")

if(SKETCHCORE_BLAS STREQUAL "scipy-openblas32")
  if(NOT Python_EXECUTABLE)
    find_package(Python COMPONENTS Interpreter REQUIRED)
  endif()
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
            "import scipy_openblas32 as s; print(s.get_include_dir()); print(s.get_lib_dir()); print(s.get_library(fullname=True))"
    OUTPUT_VARIABLE _sc_openblas OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _sc_openblas_rc ERROR_VARIABLE _sc_openblas_err)
  if(NOT _sc_openblas_rc EQUAL 0)
    message(FATAL_ERROR
      "SKETCHCORE_BLAS=scipy-openblas32 needs the Python package scipy-openblas32 importable by "
      "${Python_EXECUTABLE} (pip install scipy-openblas32), or choose -DSKETCHCORE_BLAS=OpenBLAS|Generic.\n"
      "${_sc_openblas_err}")
  endif()
  string(REPLACE "\n" ";" _sc_openblas "${_sc_openblas}")
  list(GET _sc_openblas 0 SKETCHCORE_BLAS_INCLUDE_DIR)
  list(GET _sc_openblas 1 SKETCHCORE_OPENBLAS_LIB_DIR)
  list(GET _sc_openblas 2 _sc_openblas_file)
  target_link_libraries(sketchcore_blas INTERFACE "${SKETCHCORE_OPENBLAS_LIB_DIR}/${_sc_openblas_file}")
  list(APPEND SKETCHCORE_BLAS_DEFINITIONS SKETCHCORE_BLAS_PREFIX=scipy_)
elseif(SKETCHCORE_BLAS STREQUAL "OpenBLAS" OR SKETCHCORE_BLAS STREQUAL "Generic")
  if(SKETCHCORE_BLAS STREQUAL "OpenBLAS")
    set(BLA_VENDOR OpenBLAS)
  endif()
  find_package(BLAS REQUIRED)
  target_link_libraries(sketchcore_blas INTERFACE ${BLAS_LIBRARIES} ${BLAS_LINKER_FLAGS})
  if(NOT SKETCHCORE_BLAS_INCLUDE_DIR)
    find_path(SKETCHCORE_BLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
  endif()
  if(NOT SKETCHCORE_BLAS_INCLUDE_DIR)
    message(FATAL_ERROR "cblas.h not found: set -DSKETCHCORE_BLAS_INCLUDE_DIR=<dir containing cblas.h>")
  endif()
else()
  message(FATAL_ERROR "SKETCHCORE_BLAS must be scipy-openblas32, OpenBLAS or Generic, got '${SKETCHCORE_BLAS}'")
endif()

# Optional CBLAS features, probed by linking against the chosen library rather than assumed
# from its name: OpenBLAS added cblas_?gemm_batch_strided only in recent releases (Debian 12's
# 0.3.21 lacks it), and a generic CBLAS has neither extension.
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)
# Defines `result` when the C function `symbol` links (its signature does not matter here).
function(sketchcore_check_blas_symbol symbol result)
  check_cxx_source_compiles("extern \"C\" void ${symbol}();
int main() { void (*volatile f)() = &${symbol}; return f == nullptr; }" ${result})
endfunction()
set(_sc_prefix "")
if(SKETCHCORE_BLAS STREQUAL "scipy-openblas32")
  set(_sc_prefix "scipy_")
endif()
cmake_push_check_state(RESET)
find_package(Threads REQUIRED)
get_target_property(CMAKE_REQUIRED_LIBRARIES sketchcore_blas INTERFACE_LINK_LIBRARIES)
list(APPEND CMAKE_REQUIRED_LIBRARIES Threads::Threads)
set(CMAKE_REQUIRED_QUIET ON)
sketchcore_check_blas_symbol(${_sc_prefix}cblas_sgemm_batch_strided SKETCHCORE_BLAS_HAS_BATCH_STRIDED)
sketchcore_check_blas_symbol(${_sc_prefix}openblas_set_num_threads SKETCHCORE_BLAS_HAS_SET_NUM_THREADS)
cmake_pop_check_state()
set(_sc_batched OFF)
set(_sc_threads OFF)
if(SKETCHCORE_BLAS_HAS_BATCH_STRIDED)
  set(_sc_batched ON)
  list(APPEND SKETCHCORE_BLAS_DEFINITIONS SKETCHCORE_BLAS_HAS_BATCH_STRIDED=1)
endif()
if(SKETCHCORE_BLAS_HAS_SET_NUM_THREADS)
  set(_sc_threads ON)
  list(APPEND SKETCHCORE_BLAS_DEFINITIONS SKETCHCORE_BLAS_HAS_SET_NUM_THREADS=1)
endif()
message(STATUS "sketchcore: CBLAS = ${SKETCHCORE_BLAS} (cblas.h in ${SKETCHCORE_BLAS_INCLUDE_DIR}); "
               "batched GEMM ${_sc_batched}, thread control ${_sc_threads}")

# A shared libsketchcore links its BLAS privately: consumers need nothing of it, so nothing
# of it is exported (its path may point into a pip build environment that no longer exists).
# A static one carries the link line into the consumer's link.
if(SKETCHCORE_INSTALL AND NOT BUILD_SHARED_LIBS)
  install(TARGETS sketchcore_blas EXPORT sketchcoreTargets)
endif()
