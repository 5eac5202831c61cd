// A second DSO (like the ExecuTorch delegate) that reads the request of the calling thread.
#include "plugins.h"

namespace gearbox_test {

gearbox::ProfileRequest reader_current() { return gearbox::OptimizationProfileGuard::current(); }

}  // namespace gearbox_test
