# The fixture of the example tests: normlab installed once, with its compiled
# driver, into WORK_DIR/prefix (install_normlab.cmake), for every example that
# builds against it (-DSHARED_PREFIX=WORK_DIR/prefix).
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/install_normlab.cmake)
install_normlab(ON)
message(STATUS "normlab installed with its compiled driver in ${NORMLAB_PREFIX}")
