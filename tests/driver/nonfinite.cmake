# A NaN injected into a gradient at step 3 stops the run (exit 3) with a
# message naming the step; the checkpoint of step 2 is kept and resumes.
set(common --data synthetic --steps 4 --d 32 --layers 2 --heads 2 --seq 32 --batch 4
           --eval-every 2 --eval-batches 1 --ckpt-every 1 --quiet --out ${WORK})
file(REMOVE_RECURSE ${WORK} ${WORK}_skip)
execute_process(COMMAND ${EXE} ${common} --fault-nan-at 3 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 3)
  message(FATAL_ERROR "expected exit 3 on a non-finite gradient, got ${rc}\n${out}${err}")
endif()
string(FIND "${err}" "at step 3" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "the message does not name step 3:\n${err}")
endif()
file(READ ${WORK}/metrics.jsonl log)
string(FIND "${log}" "non-finite gradient norm at step 3" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "metrics.jsonl does not log the event:\n${log}")
endif()
execute_process(COMMAND ${EXE} ${common} --resume RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "resuming from the last good checkpoint failed (${rc})\n${out}${err}")
endif()
# --on-nonfinite skip: the bad update is skipped and the run completes
execute_process(COMMAND ${EXE} ${common} --fault-nan-at 3 --on-nonfinite skip --out ${WORK}_skip
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--on-nonfinite skip did not complete (${rc})\n${out}${err}")
endif()
