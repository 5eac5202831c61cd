// Each GEARBOX_CF_* variant must fail to compile; with none defined this file compiles,
// which proves that the failures come from the marked line and not from a typo.
#include "gearbox/profile_guard.h"

int main() {
#if defined(GEARBOX_CF_BOOL)
  gearbox::OptimizationProfileGuard g(true);
#elif defined(GEARBOX_CF_COPY)
  gearbox::OptimizationProfileGuard a(1);
  gearbox::OptimizationProfileGuard b(a);
#elif defined(GEARBOX_CF_MOVE)
  gearbox::OptimizationProfileGuard a(1);
  gearbox::OptimizationProfileGuard b(std::move(a));
#elif defined(GEARBOX_CF_BARE_AUTOMATIC)
  gearbox::OptimizationProfileGuard::automatic();
#elif defined(GEARBOX_CF_BARE_NAMED)
  gearbox::OptimizationProfileGuard::named("decode");
#else
  gearbox::OptimizationProfileGuard g(1);
  auto a = gearbox::OptimizationProfileGuard::automatic();
  auto n = gearbox::OptimizationProfileGuard::named("decode");
#endif
  return 0;
}
