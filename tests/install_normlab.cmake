# install_normlab(PREBUILT): normlab from SOURCE_DIR installed into WORK_DIR/prefix,
# as a user would (no tests, tools or examples). PREBUILT ON: with the compiled
# driver (normlab::driver, built first); OFF: headers only. Included by the cmake
# -P scripts that build a project against the installed package (consumer/ builds
# header-only, custom_policies/ against normlab::driver: both modes stay tested).
# The built-in models' library is left out (NORMLAB_EXAMPLE_MODELS OFF) unless a
# script sets it: the example projects define variants of their own, and
# compiling ten models each time would double their time.
if(NOT DEFINED NORMLAB_EXAMPLE_MODELS)
  set(NORMLAB_EXAMPLE_MODELS OFF)
endif()
function(install_normlab prebuilt)
  # The example tests share one install with the compiled driver (the fixture
  # "example: normlab installed with its compiled driver", SHARED_PREFIX): built
  # once, not once per example.
  if(prebuilt AND DEFINED SHARED_PREFIX)
    if(NOT EXISTS ${SHARED_PREFIX}/lib/cmake/normlab/normlabConfig.cmake)
      message(FATAL_ERROR "install_normlab: no installed package in ${SHARED_PREFIX} (its fixture test failed?)")
    endif()
    set(NORMLAB_PREFIX ${SHARED_PREFIX} PARENT_SCOPE)
    return()
  endif()
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/lib-build -G ${GENERATOR}
      -DNORMLAB_BUILD_TESTS=OFF -DNORMLAB_BUILD_TOOLS=OFF -DNORMLAB_BUILD_EXAMPLES=OFF
      -DNORMLAB_PREBUILT_DRIVER=${prebuilt} -DNORMLAB_PREBUILT_MODELS=${NORMLAB_EXAMPLE_MODELS}
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/lib-build)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/lib-build)
  set(NORMLAB_PREFIX ${WORK_DIR}/prefix PARENT_SCOPE)
endfunction()
