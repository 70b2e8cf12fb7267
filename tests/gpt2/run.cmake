cmake_policy(SET CMP0053 NEW)
# example:gpt2 — GPT-2's block and nGPT on its shapes (examples/gpt2) as a user
# builds them: install normlab into a scratch prefix, copy the project out of
# the tree, build it against the package, then
#   1. check_gpt2: float64 gradcheck of every parameter (LayerNorm gains and
#      biases, every linear bias, the learned position table) ≤ 1e-6, and
#      KV-cache decoding equal to the full forward (≤ 1e-12), for both models;
#   2. gpt2 trains through normlab's driver: its checkpoint records learned
#      positions, their table and the biases, and a RoPE run resuming from it is
#      refused naming the field (exit 2);
#   3. the installed normlab-ablate (-DABLATE) trains gpt and ngpt (the package's
#      trainers) and gpt2 and ngpt_gpt2 (the project's) into one table.
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/../run_checked.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../install_normlab.cmake)
install_normlab(ON)
file(COPY ${SOURCE_DIR}/examples/gpt2/ DESTINATION ${WORK_DIR}/project)
run(${CMAKE_COMMAND} -S ${WORK_DIR}/project -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${NORMLAB_PREFIX} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

run(${WORK_DIR}/build/check_gpt2)
message(STATUS "${last_out}")
foreach(m gpt2 ngpt_gpt2)
  if(NOT last_out MATCHES "${m} gradcheck: [0-9]+ tensors, T 11, positions learned, bias [01]: max_rel_error [0-9.e+-]+ \\([^)]*\\) PASS")
    message(FATAL_ERROR "check_gpt2: no gradcheck PASS line for ${m}")
  endif()
  if(NOT last_out MATCHES "${m} decode: 24 tokens: [^\n]* PASS")
    message(FATAL_ERROR "check_gpt2: no decode PASS line for ${m}")
  endif()
endforeach()

set(small --data synthetic --batch 4 --seq 32 --d 32 --layers 2 --heads 4 --eval-every 10 --eval-batches 2
          --threads 2 --quiet)
run(${WORK_DIR}/build/train-gpt2 ${small} --steps 20 --ckpt-every 10 --out ${WORK_DIR}/gpt2_run)
file(READ ${WORK_DIR}/gpt2_run/ckpt.safetensors header OFFSET 8 LIMIT 60000)
foreach(want "\"positions\":\"learned\"" "\"n_positions\":\"32\"" "\"bias\":\"1\"" "input_norm=layernorm"
             "mlp_activation=gelu_tanh")
  string(FIND "${header}" "${want}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "gpt2: the checkpoint's header lacks ${want}")
  endif()
endforeach()
# The position table is (--seq, d) and c_fc is plain (F = 4·32 rows) with its bias.
if(NOT header MATCHES "\"transformer\\.wpe\\.weight\":{[^}]*\"shape\":\\[32,32\\]")
  message(FATAL_ERROR "gpt2: the checkpoint's wpe is not (32, 32)")
endif()
if(NOT header MATCHES "\"transformer\\.h\\.0\\.c_fc\\.bias\":{[^}]*\"shape\":\\[128\\]")
  message(FATAL_ERROR "gpt2: the checkpoint's c_fc.bias is not (128)")
endif()
execute_process(COMMAND ${WORK_DIR}/build/train-gpt2 ${small} --steps 30 --positions rope --resume --out ${WORK_DIR}/gpt2_run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT "${out}${err}" MATCHES "the model has (rope|0)")
  message(FATAL_ERROR "gpt2: resuming a learned-positions checkpoint with --positions rope gave rc ${rc}:\n${out}${err}")
endif()
message(STATUS "gpt2: a RoPE run refuses the learned-positions checkpoint: ${err}")

run(${ABLATE} --variants gpt,ngpt,gpt2,ngpt_gpt2 --seeds 1 --bin-dir ${WORK_DIR}/build --out ${WORK_DIR}/study
    -- --data synthetic --steps 40 --batch 4 --seq 32 --d 32 --layers 2 --heads 4 --eval-every 10 --eval-batches 2
    --ckpt-every 20)
file(READ ${WORK_DIR}/study/results.md table)
message(STATUS "normlab-ablate's table:\n${table}")
foreach(v gpt ngpt gpt2 ngpt_gpt2)
  if(NOT table MATCHES "\n\\| ${v}( \\(baseline\\))? \\| 1 \\| [0-9]+\\.[0-9]+ \\|")
    message(FATAL_ERROR "results.md has no row with a final loss for ${v}:\n${table}")
  endif()
endforeach()
message(STATUS "gpt2: gradcheck and decode passed, trained by normlab's driver, in normlab-ablate's table")
