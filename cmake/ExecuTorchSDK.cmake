# Finds the ExecuTorch C++ SDK that the `executorch` PyPI wheel ships and exposes it as one
# target, gearbox::executorch_sdk, whatever the CMake version. With CMake >= 3.28 the
# wheel's package defines executorch::runtime; older CMake (Debian 12 has 3.25) gets only
# variables, applied here by hand. See docs/DEPENDENCIES.md.
#
# Sets GEARBOX_HAVE_EXECUTORCH.
set(GEARBOX_HAVE_EXECUTORCH OFF)
if(GEARBOX_WITH_EXECUTORCH STREQUAL "OFF")
  return()
endif()
if(GEARBOX_WITH_EXECUTORCH STREQUAL "ON")
  find_package(executorch CONFIG REQUIRED)
else()
  find_package(executorch CONFIG QUIET)
endif()
if(NOT executorch_FOUND)
  return()
endif()

add_library(gearbox_executorch_sdk INTERFACE)
add_library(gearbox::executorch_sdk ALIAS gearbox_executorch_sdk)
# (Also included by the installed package config, gearboxConfig.cmake.)
if(TARGET executorch::runtime)
  target_link_libraries(gearbox_executorch_sdk INTERFACE executorch::runtime)
else()
  # SYSTEM: ExecuTorch's headers are not held to gearbox's warning flags.
  target_include_directories(gearbox_executorch_sdk SYSTEM INTERFACE ${EXECUTORCH_INCLUDE_DIRS})
  target_compile_definitions(gearbox_executorch_sdk INTERFACE ${EXECUTORCH_COMPILE_DEFINITIONS})
  target_link_libraries(gearbox_executorch_sdk INTERFACE ${EXECUTORCH_LIBRARIES})
  target_link_options(gearbox_executorch_sdk INTERFACE "-Wl,-rpath,${EXECUTORCH_RUNTIME_LIBRARY_DIR}")
endif()
set(GEARBOX_HAVE_EXECUTORCH ON)
message(STATUS "gearbox: ExecuTorch SDK ${EXECUTORCH_BUILD_VERSION} from ${executorch_DIR}")
