# Compiles FILE with CHECK (a -fsyntax-only command line, ;-separated) and
# passes only when it fails to compile and its first error line contains every
# one of TEXTS (|-separated): what a user reads first names the hook and the
# member, however long the rest of the output is.
separate_arguments(cmd UNIX_COMMAND "${CHECK}")
execute_process(COMMAND ${cmd} ${FILE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${FILE} compiled; it must not")
endif()
string(REGEX MATCH "[^\n]*error:[^\n]*" first "${err}")
message(STATUS "first error: ${first}")
string(REPLACE "|" ";" texts "${TEXTS}")
foreach(t IN LISTS texts)
  string(FIND "${first}" "${t}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "the first error line does not name '${t}':\n${first}\n--- full output:\n${err}")
  endif()
endforeach()
