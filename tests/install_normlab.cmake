# install_normlab(): normlab from SOURCE_DIR installed into WORK_DIR/prefix, as a
# user would (no tests, tools or examples). Included by the cmake -P scripts that
# build a project against the installed package (consumer/, custom_policies/).
function(install_normlab)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/lib-build -G ${GENERATOR}
      -DNORMLAB_BUILD_TESTS=OFF -DNORMLAB_BUILD_TOOLS=OFF -DNORMLAB_BUILD_EXAMPLES=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/lib-build)
endfunction()
