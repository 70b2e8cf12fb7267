# Training 2N steps in one go must give the same final checkpoint, byte for
# byte, as N steps, an interruption (--stop-at N), and a --resume for the rest.
# EXTRA (a ;-list) adds flags to every run: another optimizer or schedule.
set(common --data synthetic --steps 12 --d 32 --layers 2 --heads 2 --seq 32 --batch 4
           --eval-every 4 --eval-batches 2 --ckpt-every 5 --threads 2 --quiet ${EXTRA})
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/../run_checked.cmake)
run(${EXE} ${common} --out ${WORK}/straight)
run(${EXE} ${common} --out ${WORK}/resumed --stop-at 6)
run(${EXE} ${common} --out ${WORK}/resumed --resume)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/straight/ckpt.safetensors
                        ${WORK}/resumed/ckpt.safetensors RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "the resumed run's final checkpoint differs from the uninterrupted run's")
endif()
message(STATUS "identical final checkpoints")
