// A plug-in DSO that installs a guard and calls back into another DSO while it is alive.
#include "plugins.h"

namespace gearbox_test {

gearbox::ProfileRequest setter_run_pinned(int index, gearbox::ProfileRequest (*read)()) {
  gearbox::OptimizationProfileGuard pin(index);
  return read();
}

}  // namespace gearbox_test
