cmake_policy(SET CMP0053 NEW)
# example:modern — the modern block (examples/modern) as a user builds it:
# install normlab into a scratch prefix, copy the project out of the tree,
# build it against the package, then
#   1. check_modern: float64 gradcheck of every parameter at 8 q / 2 kv heads
#      with T larger than the window (≤ 1e-6), and KV-cache decoding equal to
#      the full forward past the window (≤ 1e-12);
#   2. the modern variant trains through normlab's driver: its checkpoint
#      records the shape (n_kv_heads 2, attn_window 16), and a full-attention
#      run resuming from it is refused naming the field (exit 2);
#   3. the installed normlab-ablate (-DABLATE) trains gpt, ngpt and modern into
#      one table: train-modern from the project's --bin-dir, gpt and ngpt with the
#      package's trainers beside the tool (recorded in ablation.json).
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/../run_checked.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../install_normlab.cmake)
install_normlab(ON)
file(COPY ${SOURCE_DIR}/examples/modern/ DESTINATION ${WORK_DIR}/project)
run(${CMAKE_COMMAND} -S ${WORK_DIR}/project -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${NORMLAB_PREFIX} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

run(${WORK_DIR}/build/check_modern)
message(STATUS "${last_out}")
if(NOT last_out MATCHES "modern gradcheck: [0-9]+ tensors, heads 8 / kv heads 2, window 4, T 11: max_rel_error [0-9.e+-]+ \\([^)]*\\) PASS")
  message(FATAL_ERROR "check_modern: no gradcheck PASS line")
endif()
if(NOT last_out MATCHES "modern decode: 24 tokens, window 16, [^\n]* PASS")
  message(FATAL_ERROR "check_modern: no decode PASS line")
endif()

set(small --data synthetic --batch 4 --seq 32 --d 32 --layers 2 --heads 8 --eval-every 10 --eval-batches 2
          --threads 2 --quiet)
run(${WORK_DIR}/build/train-modern ${small} --steps 20 --ckpt-every 10 --out ${WORK_DIR}/modern_run)
file(READ ${WORK_DIR}/modern_run/ckpt.safetensors header OFFSET 8 LIMIT 60000)
foreach(want "\"n_kv_heads\":\"2\"" "\"attn_window\":\"16\"" "mlp_activation=relu2")
  string(FIND "${header}" "${want}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "modern: the checkpoint's header lacks ${want}")
  endif()
endforeach()
# K and V are (kv heads · head dim, d) = (2·4, 32): no dead rows.
if(NOT header MATCHES "\"transformer\\.h\\.0\\.key\\.weight\":{[^}]*\"shape\":\\[8,32\\]")
  message(FATAL_ERROR "modern: the checkpoint's key.weight is not (8, 32)")
endif()
execute_process(COMMAND ${WORK_DIR}/build/train-modern ${small} --steps 30 --window 0 --resume --out ${WORK_DIR}/modern_run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT "${out}${err}" MATCHES "attn_window = 16, the model has 0")
  message(FATAL_ERROR "modern: resuming a windowed checkpoint with --window 0 gave rc ${rc}:\n${out}${err}")
endif()
message(STATUS "modern: a full-attention run refuses the windowed checkpoint: ${err}")

run(${ABLATE} --variants gpt,ngpt,modern --seeds 1 --bin-dir ${WORK_DIR}/build --out ${WORK_DIR}/study
    -- --data synthetic --steps 40 --batch 4 --seq 32 --d 32 --layers 2 --heads 8 --eval-every 10 --eval-batches 2
    --ckpt-every 20)
file(READ ${WORK_DIR}/study/results.md table)
message(STATUS "normlab-ablate's table:\n${table}")
foreach(v gpt ngpt modern)
  if(NOT table MATCHES "\n\\| ${v}( \\(baseline\\))? \\| 1 \\| [0-9]+\\.[0-9]+ \\|")
    message(FATAL_ERROR "results.md has no row with a final loss for ${v}:\n${table}")
  endif()
endforeach()
file(READ ${WORK_DIR}/study/ablation.json record)
get_filename_component(tool_dir ${ABLATE} DIRECTORY)
foreach(v_dir "gpt|${tool_dir}" "ngpt|${tool_dir}" "modern|${WORK_DIR}/build")
  string(REPLACE "|" ";" v_dir "${v_dir}")
  list(GET v_dir 0 v)
  list(GET v_dir 1 dir)
  string(JSON exe GET "${record}" trainers ${v})
  if(NOT exe STREQUAL "${dir}/train-${v}")
    message(FATAL_ERROR "ablation.json: ${v} ran ${exe}, not ${dir}/train-${v}")
  endif()
endforeach()
message(STATUS "modern: gradcheck and decode passed, trained by normlab's driver, in normlab-ablate's table")
