# Selects the CBLAS that the CPU backend calls (SKETCHCORE_BLAS) and defines:
#   sketchcore_blas                      INTERFACE target carrying the link line
#   SKETCHCORE_BLAS_INCLUDE_DIR          directory holding cblas.h
#   SKETCHCORE_BLAS_DEFINITIONS          compile definitions for the one file that includes cblas.h
#
# scipy-openblas32: the pinned PyPI wheel (the Python package's default). Its symbols carry a
#                   `scipy_` prefix; it is located through the Python interpreter.
# OpenBLAS:         a system OpenBLAS (FindBLAS with BLA_VENDOR=OpenBLAS); thread control available.
# Generic:          any CBLAS that FindBLAS finds; set SKETCHCORE_BLAS_INCLUDE_DIR if cblas.h is not
#                   on the default include path. No BLAS thread control.

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
  list(APPEND SKETCHCORE_BLAS_DEFINITIONS SKETCHCORE_BLAS_PREFIX=scipy_ SKETCHCORE_BLAS_IS_OPENBLAS=1)
elseif(SKETCHCORE_BLAS STREQUAL "OpenBLAS" OR SKETCHCORE_BLAS STREQUAL "Generic")
  if(SKETCHCORE_BLAS STREQUAL "OpenBLAS")
    set(BLA_VENDOR OpenBLAS)
    list(APPEND SKETCHCORE_BLAS_DEFINITIONS SKETCHCORE_BLAS_IS_OPENBLAS=1)
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

message(STATUS "sketchcore: CBLAS = ${SKETCHCORE_BLAS} (cblas.h in ${SKETCHCORE_BLAS_INCLUDE_DIR})")

# The BLAS link line travels with a static libsketchcore into the consumer's link.
if(SKETCHCORE_INSTALL)
  install(TARGETS sketchcore_blas EXPORT sketchcoreTargets)
endif()
