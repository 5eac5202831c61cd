# cmake -DGEARBOX=path -DWORK_DIR=dir -P continuous_batching.cmake
# Continuous batching in `gearbox generate`: 10 prompts of different lengths over an engine
# of 4 KV-cache slots give, prompt for prompt, exactly the ids each gives alone (greedy).
include(${CMAKE_CURRENT_LIST_DIR}/mini_engine.cmake)
file(MAKE_DIRECTORY ${WORK_DIR})
set(prompts "2,17,300" "5" "9,8,7,6,5,4,3,2,1,0,11,12" "100,200" "42,43,44,45,46" "7,7,7,7" "1999,3"
            "2,500,501,502,503,504,505,506,507,508,509,510,511,512,513,514,515,516,517,518" "64" "3,1,4,1,5,9,2,6")

# Builds an engine with the --profile flags given and checks it: the prompts together, then each alone.
function(check_engine name)
  set(engine ${WORK_DIR}/${name}.gbx)
  build_mini_engine(${engine} --max-seq 96 ${ARGN})
  set(file_text "")
  foreach(p IN LISTS prompts)
    string(APPEND file_text "${p}\n")
  endforeach()
  file(WRITE ${WORK_DIR}/prompts.txt "${file_text}")
  execute_process(COMMAND ${GEARBOX} generate ${engine} --prompt-ids-file ${WORK_DIR}/prompts.txt --max-new-tokens 12
                          --json --device cpu
                  RESULT_VARIABLE rc OUTPUT_VARIABLE together ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generate --prompt-ids-file failed (${rc}):\n${together}${err}")
  endif()
  if(NOT err MATCHES "10 sequences over 4 slots")
    message(FATAL_ERROR "the aggregate statistics are missing:\n${err}")
  endif()
  string(REPLACE "\n" ";" lines "${together}")
  list(FILTER lines EXCLUDE REGEX "^$")
  list(LENGTH lines count)
  if(NOT count EQUAL 10)
    message(FATAL_ERROR "expected 10 lines, got ${count}:\n${together}")
  endif()

  set(i 0)
  foreach(p IN LISTS prompts)
    list(GET lines ${i} line)
    execute_process(COMMAND ${GEARBOX} generate ${engine} --prompt-ids ${p} --max-new-tokens 12 --json --device cpu
                    RESULT_VARIABLE rc OUTPUT_VARIABLE alone ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "generate --prompt-ids ${p} failed (${rc}):\n${alone}${err}")
    endif()
    string(REGEX MATCH "\"prompt_ids\": \\[[0-9, ]*\\], \"generated_ids\": \\[[0-9, ]*\\]" want "${alone}")
    string(REGEX MATCH "\"prompt_ids\": \\[[0-9, ]*\\], \"generated_ids\": \\[[0-9, ]*\\]" got "${line}")
    if(want STREQUAL "" OR NOT got STREQUAL want)
      message(FATAL_ERROR "${name}: prompt ${i} (${p}): together\n  ${got}\nalone\n  ${want}")
    endif()
    math(EXPR i "${i} + 1")
  endforeach()
  message("${name}: 10 prompts over 4 slots gave the ids each gives alone")
endfunction()

# Prompts prefilled one a call (the prefill profile's batch is 1)...
check_engine(batch4_decode --profile decode:1x1:4x1:4x1 --profile prefill:1:16:32)
# ...and those admitted together prefilled in one call, left-padded.
check_engine(batch4_prefill --profile decode:1x1:4x1:4x1 --profile prefill:1x1:4x16:4x32)
