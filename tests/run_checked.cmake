# run(COMMAND...): runs a command and stops the calling test script (FATAL_ERROR)
# with its output when it fails; its stdout is left in `last_out`. Included by
# the cmake -P test scripts (driver/*.cmake, consumer/run.cmake).
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()
