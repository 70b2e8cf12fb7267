# Configure, build and run against an installed normlab the consumer project
# (the install test: normlab installed from SOURCE_DIR headers only, so this is
# the header-only mode's check) or, with -DEXAMPLES=ON, examples/ (the
# stand-alone examples test: against the package with its compiled parts, the
# example tests' shared install SHARED_PREFIX where the tools are built, as the
# examples' CMakeLists recommends). Any failure fails the test.
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/../run_checked.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../install_normlab.cmake)
if(NOT EXAMPLES)
  install_normlab(OFF)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer-build -G ${GENERATOR}
      -DCMAKE_PREFIX_PATH=${NORMLAB_PREFIX} -DCMAKE_BUILD_TYPE=Release)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
  run(${WORK_DIR}/consumer-build/consumer)
  message(STATUS "consumer built and ran against the installed normlab")
else()
  install_normlab(ON)
  # examples/ copied out of the tree, as a user would, and built against the package.
  file(COPY ${SOURCE_DIR}/examples/ DESTINATION ${WORK_DIR}/examples-copy)
  # Warnings are errors here: the test command builds the examples only here, not
  # also in normlab's own tree (scripts/test.sh).
  run(${CMAKE_COMMAND} -S ${WORK_DIR}/examples-copy -B ${WORK_DIR}/examples-build -G ${GENERATOR}
      -DCMAKE_PREFIX_PATH=${NORMLAB_PREFIX} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror")
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/examples-build)
  run(${WORK_DIR}/examples-build/library_tour ${WORK_DIR}/tour)
  run(${WORK_DIR}/examples-build/train_tiny --steps 5)
  message(STATUS "examples built stand-alone and ran against the installed normlab")
endif()
