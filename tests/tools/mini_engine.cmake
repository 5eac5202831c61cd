# build_mini_engine(ENGINE FLAGS...): `gearbox build --mini -o ENGINE --device cpu FLAGS...`,
# a fatal error with the build's output where it fails. For the -P scripts beside this file
# (GEARBOX set by their caller).
function(build_mini_engine engine)
  execute_process(COMMAND ${GEARBOX} build --mini -o ${engine} --device cpu ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "build ${engine} (${ARGN}): exit code ${rc}\n${out}${err}")
  endif()
endfunction()
