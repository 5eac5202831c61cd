# cmake -DGEARBOX=<gearbox> -DWORK_DIR=<dir> -P bench_json.cmake
# `gearbox bench --json` escapes the strings it writes: a mini engine whose one-token profile
# is named de"co\de is benched, and its JSON read back with CMake's parser must give the
# name unchanged, with bench's keys and types, one fresh `gearbox generate` process timed
# among them. Its prefill at distinct lengths takes the default 40 of [16, 64] (16, the
# --prefill length and --context, left out). An engine whose
# prefill ends at 24 is asked for more lengths than its range holds and runs all 8, then
# none when asked for none.
set(name [[de"co\de]])
file(MAKE_DIRECTORY ${WORK_DIR})
set(engine ${WORK_DIR}/escapes.gbx)
set(json ${WORK_DIR}/escapes.json)
file(REMOVE ${json})

include(${CMAKE_CURRENT_LIST_DIR}/mini_engine.cmake)
build_mini_engine(${engine} --max-seq 64 --profile "${name}:1:1:1" --profile prefill:1:16:64)
execute_process(COMMAND ${GEARBOX} bench ${engine} --context 16 --steps 2 --prefill 16 --rounds 1 --round-decodes 2
                        --fresh-processes 1 --json ${json} --device cpu
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench: exit code ${rc}\n${out}${err}")
endif()

file(READ ${json} doc)
string(JSON got ERROR_VARIABLE error GET "${doc}" decode 0 profile)
if(error)
  message(FATAL_ERROR "bench --json wrote what CMake cannot read (${error}):\n${doc}")
endif()
if(NOT got STREQUAL name)
  message(FATAL_ERROR "the profile name came back as '${got}', not '${name}':\n${doc}")
endif()
string(FIND "${doc}" [["profile": "de\"co\\de"]] at)
if(at EQUAL -1)
  message(FATAL_ERROR "the profile name is not written as \"de\\\"co\\\\de\":\n${doc}")
endif()
foreach(key_type device:STRING weight_gb:NUMBER copy_gb_s:NUMBER decode:ARRAY prefill:ARRAY
                 load_ms:NUMBER engine_file_gb:NUMBER load_gb_s:NUMBER session_create_ms:NUMBER
                 first_prefill_ms:NUMBER warm_prefill_ms:NUMBER first_prefill_ratio:NUMBER first_decode_ms:NUMBER
                 warm_decode_ms:NUMBER first_decode_ratio:NUMBER fresh_process:OBJECT distinct_lengths:OBJECT
                 memory_overhead_percent:NUMBER switch_ms:NUMBER switch_into_decode_host_us:NUMBER
                 switch_into_prefill_host_us:NUMBER round_switching_ms:NUMBER round_prefill_only_ms:NUMBER
                 validated:BOOLEAN checked_calls:NUMBER)
  string(REPLACE ":" ";" pair ${key_type})
  list(GET pair 0 key)
  list(GET pair 1 want)
  string(JSON type ERROR_VARIABLE error TYPE "${doc}" ${key})
  if(NOT type STREQUAL want)
    message(FATAL_ERROR "'${key}' is ${type} (${error}), not ${want}:\n${doc}")
  endif()
endforeach()
string(JSON ms TYPE "${doc}" decode 0 ms)
string(JSON tokens GET "${doc}" prefill 0 tokens)
if(NOT ms STREQUAL "NUMBER" OR NOT tokens EQUAL 16)
  message(FATAL_ERROR "decode[0].ms is ${ms}, prefill[0].tokens is ${tokens}:\n${doc}")
endif()
foreach(key n first_ms first_p90_ms repeat_ms repeat_p90_ms ratio)
  string(JSON type ERROR_VARIABLE error TYPE "${doc}" distinct_lengths ${key})
  if(NOT type STREQUAL "NUMBER")
    message(FATAL_ERROR "'distinct_lengths.${key}' is ${type} (${error}), not NUMBER:\n${doc}")
  endif()
endforeach()
# One fresh `gearbox generate` process, its prompt clipped to the context (64) less one.
foreach(key runs prompt_tokens first_token_ms exit_ms)
  string(JSON type ERROR_VARIABLE error TYPE "${doc}" fresh_process ${key})
  if(NOT type STREQUAL "NUMBER")
    message(FATAL_ERROR "'fresh_process.${key}' is ${type} (${error}), not NUMBER:\n${doc}")
  endif()
endforeach()
string(JSON runs GET "${doc}" fresh_process runs)
string(JSON prompt_tokens GET "${doc}" fresh_process prompt_tokens)
string(JSON first_token_ms GET "${doc}" fresh_process first_token_ms)
string(JSON exit_ms GET "${doc}" fresh_process exit_ms)
if(NOT runs EQUAL 1 OR NOT prompt_tokens EQUAL 63 OR first_token_ms LESS_EQUAL 0 OR exit_ms LESS first_token_ms)
  message(FATAL_ERROR "fresh_process has runs ${runs} (want 1), prompt_tokens ${prompt_tokens} (want 63), "
                      "first_token_ms ${first_token_ms}, exit_ms ${exit_ms}:\n${doc}")
endif()
# Where its first token's time went, from its debug lines: phases in the order they end,
# each within the process's life before the token.
set(previous 0)
foreach(key load_start_ms device_ready_ms weights_uploaded_ms engine_ready_ms session_ready_ms)
  string(JSON value ERROR_VARIABLE error GET "${doc}" fresh_process phases ${key})
  if(error OR value LESS previous OR value GREATER first_token_ms)
    message(FATAL_ERROR "'fresh_process.phases.${key}' is '${value}' (${error}): not within "
                        "[${previous}, ${first_token_ms}]:\n${doc}")
  endif()
  set(previous ${value})
endforeach()
string(JSON n GET "${doc}" distinct_lengths n)
string(JSON first_ms GET "${doc}" distinct_lengths first_ms)
if(NOT n EQUAL 40 OR first_ms LESS_EQUAL 0)
  message(FATAL_ERROR "distinct_lengths has n ${n} (want 40) and first_ms ${first_ms}:\n${doc}")
endif()
# Each length once, with its two timings.
string(JSON listed LENGTH "${doc}" distinct_lengths lengths)
string(JSON last_tokens GET "${doc}" distinct_lengths lengths 39 tokens)
string(JSON last_third TYPE "${doc}" distinct_lengths lengths 39 third_ms)
if(NOT listed EQUAL 40 OR last_tokens LESS 16 OR last_tokens GREATER 64 OR NOT last_third STREQUAL "NUMBER")
  message(FATAL_ERROR "distinct_lengths.lengths has ${listed} entries (want 40), the last of ${last_tokens} tokens "
                      "with third_ms a ${last_third}:\n${doc}")
endif()
message("${doc}")

set(short_engine ${WORK_DIR}/short.gbx)
build_mini_engine(${short_engine} --max-seq 64 --profile decode:1:1:1 --profile prefill:1:16:24)
foreach(count_n 100:8 0:0)
  string(REPLACE ":" ";" pair ${count_n})
  list(GET pair 0 count)
  list(GET pair 1 want)
  execute_process(COMMAND ${GEARBOX} bench ${short_engine} --context 16 --steps 2 --prefill 16 --rounds 1
                          --round-decodes 2 --distinct-lengths ${count} --fresh-processes 0 --json ${json} --device cpu
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bench --distinct-lengths ${count}: exit code ${rc}\n${out}${err}")
  endif()
  file(READ ${json} doc)
  string(JSON n GET "${doc}" distinct_lengths n)
  if(NOT n EQUAL want)
    message(FATAL_ERROR "--distinct-lengths ${count} ran ${n} lengths, not ${want}:\n${doc}")
  endif()
endforeach()
