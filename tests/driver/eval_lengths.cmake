# normlab-eval on every variant: a tiny run at T = 32, then the evaluation at 32
# and 64. At the training length and batch, on the same number of batches, the
# evaluation is the training run's own final validation loss (same windows, same
# forward: equal to float32 noise, 1e-6 relative); the longer length runs, with
# RoPE extended, and yields a finite loss for every position bucket.
# --multiples 1,2 (of the training context) evaluates the same lengths as --seq 32,64,
# to the bit; a multiple out of range, or neither flag, is refused (exit 2).
#   cmake -DBIN=<build dir> -DVARIANTS=gpt;ngpt;... -DWORK=<dir> -P eval_lengths.cmake
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/../run_checked.cmake)
foreach(v ${VARIANTS})
  set(dir ${WORK}/${v})
  run(${BIN}/train-${v} --data synthetic --steps 3 --d 32 --layers 2 --heads 2 --seq 32 --batch 2
      --eval-every 3 --eval-batches 2 --quiet --out ${dir})
  file(STRINGS ${dir}/metrics.jsonl lines)
  list(GET lines -1 final)
  string(JSON trained GET "${final}" val_loss)
  run(${BIN}/normlab-eval ${dir}/ckpt.safetensors --data synthetic --seq 32,64 --batch 2 --batches 2
      --out ${dir}/eval)
  file(READ ${dir}/eval/eval.json j)
  string(JSON at32 GET "${j}" lengths 0 loss)
  string(JSON len1 GET "${j}" lengths 1 length)
  string(JSON at64 GET "${j}" lengths 1 loss)
  string(JSON buckets LENGTH "${j}" lengths 1 bucket_loss)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" a "${at32}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" b "${trained}")
  # Compare the first 7 significant digits (1e-6 relative at losses of order 1-10).
  string(SUBSTRING "${a}" 0 8 a7)
  string(SUBSTRING "${b}" 0 8 b7)
  if(NOT a7 STREQUAL b7)
    message(FATAL_ERROR "${v}: evaluation at the training length gives ${at32}, the run's own val loss is ${trained}")
  endif()
  if(NOT len1 EQUAL 64 OR NOT buckets EQUAL 2 OR at64 MATCHES "nan|inf|null")
    message(FATAL_ERROR "${v}: the evaluation at 64 is missing or not finite: ${j}")
  endif()
  if(v STREQUAL "angpt_attnfactor" AND NOT last_out MATCHES "held fixed: attn_output_factor")
    message(FATAL_ERROR "${v}: the evaluation does not say which factor it held fixed:\n${last_out}")
  endif()
  run(${BIN}/normlab-eval ${dir}/ckpt.safetensors --data synthetic --multiples 1,2 --batch 2 --batches 2
      --out ${dir}/eval_multiples)
  file(READ ${dir}/eval_multiples/eval.json jm)
  string(JSON m32 GET "${jm}" lengths 0 loss)
  string(JSON mlen1 GET "${jm}" lengths 1 length)
  string(JSON m64 GET "${jm}" lengths 1 loss)
  if(NOT m32 STREQUAL at32 OR NOT mlen1 EQUAL 64 OR NOT m64 STREQUAL at64)
    message(FATAL_ERROR "${v}: --multiples 1,2 gives ${m32}/${mlen1}/${m64}, --seq 32,64 gives ${at32}/64/${at64}")
  endif()
  message(STATUS "${v}: T=32 ${at32} (run: ${trained}), T=64 ${at64}")
endforeach()

# Refusals, on the last variant's checkpoint.
foreach(bad "--multiples;0" "--multiples;1,65" "--batches;2")
  execute_process(COMMAND ${BIN}/normlab-eval ${dir}/ckpt.safetensors --data synthetic ${bad}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "normlab-eval ${bad}: exit ${rc}, expected 2\n${out}${err}")
  endif()
  if(NOT err MATCHES "--multiples|--seq")
    message(FATAL_ERROR "normlab-eval ${bad}: the error does not name the flag:\n${err}")
  endif()
endforeach()
execute_process(COMMAND ${BIN}/normlab-eval ${dir}/ckpt.safetensors --data synthetic --seq 32 --multiples 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "normlab-eval with both --seq and --multiples: exit ${rc}, expected 2\n${out}${err}")
endif()
