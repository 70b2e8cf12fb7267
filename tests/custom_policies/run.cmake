cmake_policy(SET CMP0053 NEW)
# example:custom-policies — a user's project, as a user would build it: install
# normlab into a scratch prefix, copy examples/custom_policies out of the tree,
# build it against the package (no access to normlab's sources), then
#   1. gradcheck_custom: DyT, Peri-LN and gated_add pass float64 finite
#      differences at 1e-6 with normlab's checker;
#   2. the installed normlab-ablate (-DABLATE) trains normlab's gpt (the
#      package's trainer) and the three custom variants through normlab's driver,
#      from the project's --bin-dir, and its table lists every one of them;
#   3. the user's own optimizer (my_optimizer.hpp, --optimizer sgd) trains
#      gpt_dyt through the driver with falling loss, its momentum buffer in the
#      checkpoint, and a stopped and resumed run ends byte-identical to a
#      straight one.
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/../run_checked.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../install_normlab.cmake)
install_normlab(ON)
file(COPY ${SOURCE_DIR}/examples/custom_policies/ DESTINATION ${WORK_DIR}/project)
run(${CMAKE_COMMAND} -S ${WORK_DIR}/project -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${NORMLAB_PREFIX} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

run(${WORK_DIR}/build/gradcheck_custom)
message(STATUS "${last_out}")
foreach(v gpt_dyt gpt_periln gpt_gated)
  if(NOT last_out MATCHES "${v} +[0-9]+ tensors +max_rel_error [0-9.e+-]+ \\([^)]*\\) +PASS")
    message(FATAL_ERROR "gradcheck_custom: no PASS line for ${v}")
  endif()
endforeach()
if(NOT last_out MATCHES "custom gradcheck: PASS")
  message(FATAL_ERROR "gradcheck_custom did not pass")
endif()

run(${ABLATE} --variants gpt,gpt_dyt,gpt_periln,gpt_gated --seeds 1 --bin-dir ${WORK_DIR}/build
    --out ${WORK_DIR}/study -- --data synthetic --steps 40 --batch 4 --seq 32 --d 32 --layers 2 --heads 2
    --eval-every 10 --eval-batches 2 --ckpt-every 20)
file(READ ${WORK_DIR}/study/results.md table)
foreach(v gpt gpt_dyt gpt_periln gpt_gated)
  if(NOT table MATCHES "\n\\| ${v}( \\(baseline\\))? \\| 1 \\| [0-9]+\\.[0-9]+ \\|")
    message(FATAL_ERROR "results.md has no row with a final loss for ${v}:\n${table}")
  endif()
endforeach()

set(sgd --data synthetic --steps 30 --batch 4 --seq 32 --d 32 --layers 2 --heads 2 --eval-every 10
        --eval-batches 2 --ckpt-every 7 --threads 2 --quiet --optimizer sgd --lr 0.05 --momentum 0.9
        --opt dampening=0.1)
run(${WORK_DIR}/build/train-gpt_dyt ${sgd} --out ${WORK_DIR}/sgd_straight)
run(${WORK_DIR}/build/train-gpt_dyt ${sgd} --out ${WORK_DIR}/sgd_resumed --stop-at 13)
run(${WORK_DIR}/build/train-gpt_dyt ${sgd} --out ${WORK_DIR}/sgd_resumed --resume)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/sgd_straight/ckpt.safetensors
                        ${WORK_DIR}/sgd_resumed/ckpt.safetensors RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "sgd: the resumed run's final checkpoint differs from the straight run's")
endif()
# The JSON header after the 8-byte length (which may hold zero bytes, where a CMake string ends).
file(READ ${WORK_DIR}/sgd_straight/ckpt.safetensors header OFFSET 8 LIMIT 60000)
foreach(want "\"optimizer\":\"sgd\"" "\"optim.dampening\":\"0.1\"" "optim/momentum_buffer/lm_head.weight")
  string(FIND "${header}" "${want}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "sgd: the checkpoint's header lacks ${want}")
  endif()
endforeach()
file(STRINGS ${WORK_DIR}/sgd_straight/metrics.jsonl lines)
list(GET lines 0 first)
list(GET lines -1 last)
string(REGEX MATCH "\"train_loss\":[0-9.e+-]+" first_loss "${first}")
string(REGEX MATCH "\"train_loss\":[0-9.e+-]+" last_loss "${last}")
string(REPLACE "\"train_loss\":" "" first_loss "${first_loss}")
string(REPLACE "\"train_loss\":" "" last_loss "${last_loss}")
if(NOT last_loss LESS first_loss)
  message(FATAL_ERROR "sgd: loss did not fall (${first_loss} -> ${last_loss})")
endif()
message(STATUS "user optimizer sgd: loss ${first_loss} -> ${last_loss}, checkpoint holds its state, resume exact")

# The user's own schedule (train_custom.cpp: register_schedule("inv_sqrt", ...)):
# 4 warmup steps, then lr·sqrt(4/(step+1)); step 16 (0-based 15) runs at 0.05·sqrt(4/16) = 0.025.
run(${WORK_DIR}/build/train-gpt_dyt --data synthetic --steps 16 --batch 4 --seq 32 --d 32 --layers 2 --heads 2
    --eval-every 0 --eval-batches 1 --ckpt-every 0 --quiet --lr 0.05 --min-lr 0 --warmup 4 --schedule inv_sqrt
    --out ${WORK_DIR}/inv_sqrt)
file(STRINGS ${WORK_DIR}/inv_sqrt/metrics.jsonl lines)
list(GET lines -1 last)
if(NOT last MATCHES "\"lr\":0\.025[,}]")
  message(FATAL_ERROR "inv_sqrt: the last step's rate is not 0.025: ${last}")
endif()
file(READ ${WORK_DIR}/inv_sqrt/summary.json summary)
if(NOT summary MATCHES "\"name\": \"inv_sqrt\"")
  message(FATAL_ERROR "inv_sqrt: summary.json does not name the schedule:\n${summary}")
endif()
message(STATUS "user schedule inv_sqrt: the driver ran it (last rate 0.025) and recorded its name")
message(STATUS "custom policies: gradcheck passed, trained by normlab's driver, in normlab-ablate's table")
