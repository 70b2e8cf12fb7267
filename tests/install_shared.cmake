# The fixture of the example tests: normlab, with its compiled driver and the
# built-in variants' models, installed once into WORK_DIR/prefix for every example
# that builds against it (-DSHARED_PREFIX=WORK_DIR/prefix). It installs this build
# tree (BINARY_DIR), as a user who built normlab runs `cmake --install`: the
# libraries are the ones the test command already compiled, not compiled again.
# (The consumer test still installs from a fresh configure of the sources,
# headers only: install_normlab.cmake.)
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake)
run(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)
if(NOT EXISTS ${WORK_DIR}/prefix/lib/cmake/normlab/normlabConfig.cmake)
  message(FATAL_ERROR "cmake --install ${BINARY_DIR} left no normlabConfig.cmake in ${WORK_DIR}/prefix")
endif()
message(STATUS "normlab installed with its compiled driver in ${WORK_DIR}/prefix")
