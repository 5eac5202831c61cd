# cmake -DGEARBOX=<gearbox> -DWORK_DIR=<dir> -P bench_batch.cmake
# `gearbox bench --batch 1,2,4` on a mini engine of 4 KV-cache slots whose prefill profile
# takes 2 rows (batch 4 fills its slots in two calls): its JSON holds one entry per batch
# size, in the order given, with positive timings, tokens/s and speedups over batch 1 for its
# passes (logits into a Tensor, into page-locked host memory, left in device memory); a second
# run asking for more decode steps than the context holds after the prompt gets the steps that
# fit.
file(MAKE_DIRECTORY ${WORK_DIR})
set(engine ${WORK_DIR}/batched.gbx)
set(json ${WORK_DIR}/batch.json)
file(REMOVE ${json})

include(${CMAKE_CURRENT_LIST_DIR}/mini_engine.cmake)
build_mini_engine(${engine} --max-seq 64 --profile decode4:1x1:4x1:4x1 --profile prefill:1x16:2x16:2x64)

# Runs bench --batch 1,2,4 with --steps `steps`; checks the JSON and that each entry ran `want_steps`.
function(check_bench steps want_steps)
  execute_process(COMMAND ${GEARBOX} bench ${engine} --batch 1,2,4 --context 16 --steps ${steps} --json ${json}
                          --device cpu
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bench --batch 1,2,4 --steps ${steps}: exit code ${rc}\n${out}${err}")
  endif()
  if(NOT out MATCHES "batch: a 16-token prompt in each of B slots, then 3 warm-up and ${want_steps} timed decode")
    message(FATAL_ERROR "bench --steps ${steps} did not report ${want_steps} timed steps:\n${out}")
  endif()
  if(NOT out MATCHES "\n +4  0 'decode4' +[0-9.]+  \\([0-9.]+, [0-9.]+\\)")
    message(FATAL_ERROR "the table has no row for batch 4 on profile 0 'decode4':\n${out}")
  endif()
  file(READ ${json} doc)
  string(JSON type ERROR_VARIABLE error TYPE "${doc}" batch)
  if(NOT type STREQUAL "ARRAY")
    message(FATAL_ERROR "'batch' is ${type} (${error}), not ARRAY:\n${doc}")
  endif()
  string(JSON n LENGTH "${doc}" batch)
  string(JSON validated GET "${doc}" validated)
  if(NOT n EQUAL 3 OR NOT validated STREQUAL "ON")
    message(FATAL_ERROR "'batch' has ${n} entries (want 3), validated is ${validated}:\n${doc}")
  endif()
  set(i 0)
  foreach(want_batch 1 2 4)
    string(JSON batch GET "${doc}" batch ${i} batch)
    string(JSON profile GET "${doc}" batch ${i} profile)
    string(JSON got_steps GET "${doc}" batch ${i} steps)
    string(JSON prompt GET "${doc}" batch ${i} prompt_tokens)
    string(JSON base GET "${doc}" batch ${i} speedup_vs_batch)
    if(NOT batch EQUAL want_batch OR NOT profile STREQUAL "decode4" OR NOT got_steps EQUAL want_steps
       OR NOT prompt EQUAL 16 OR NOT base EQUAL 1)
      message(FATAL_ERROR "batch[${i}] is batch ${batch} on '${profile}', ${got_steps} steps after ${prompt} tokens, "
                          "speedup over batch ${base} (want ${want_batch} on 'decode4', ${want_steps} steps after 16, "
                          "over batch 1):\n${doc}")
    endif()
    foreach(key step_ms_median step_ms_p10 step_ms_p90 token_ms tokens_per_s speedup pinned_logits_step_ms_median
                device_logits_step_ms_median device_logits_step_ms_p10 device_logits_step_ms_p90
                device_logits_tokens_per_s device_logits_speedup)
      string(JSON value GET "${doc}" batch ${i} ${key})
      if(NOT value GREATER 0)
        message(FATAL_ERROR "batch[${i}].${key} is ${value}, not a positive number:\n${doc}")
      endif()
    endforeach()
    math(EXPR i "${i} + 1")
  endforeach()
  foreach(key speedup device_logits_speedup)
    string(JSON speedup GET "${doc}" batch 0 ${key})
    if(NOT speedup EQUAL 1)
      message(FATAL_ERROR "batch 1's ${key} over itself is ${speedup}, not 1:\n${doc}")
    endif()
  endforeach()
  message("${out}")
endfunction()

check_bench(4 4)
# The context of 64 rows holds the 16-token prompt and three passes of 3 warm-up steps and 13
# timed ones.
check_bench(1000 13)
