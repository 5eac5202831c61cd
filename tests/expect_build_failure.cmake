# cmake -DBUILD_DIR=... -DTARGET=... -DEXPECT_REGEX=... -P expect_build_failure.cmake
# Passes only when building TARGET fails and the compiler output matches EXPECT_REGEX.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must not")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "${TARGET} failed for another reason than '${EXPECT_REGEX}':\n${out}${err}")
endif()
message(STATUS "${TARGET} failed to compile, as it must")
