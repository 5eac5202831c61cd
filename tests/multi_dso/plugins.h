// Two test plug-ins, each its own shared library linked against libgearbox.
#pragma once

#include "gearbox/profile_guard.h"

#define GEARBOX_TEST_PLUGIN_API __attribute__((visibility("default")))

namespace gearbox_test {

/// In libguard_setter: installs OptimizationProfileGuard(index) and calls `read` under it.
GEARBOX_TEST_PLUGIN_API gearbox::ProfileRequest setter_run_pinned(int index, gearbox::ProfileRequest (*read)());
/// In libguard_reader: the calling thread's current request.
GEARBOX_TEST_PLUGIN_API gearbox::ProfileRequest reader_current();

}  // namespace gearbox_test
