// The one definition of the thread-local profile request. It lives in this translation
// unit of the gearbox shared library only, so that every DSO in a process (the
// ExecuTorch delegate, an application, a plug-in) reads and writes the same request.
#include "gearbox/profile_guard.h"

#include <string>

namespace gearbox {
namespace {

thread_local ProfileRequest t_current_request;

}  // namespace

OptimizationProfileGuard::OptimizationProfileGuard(ProfileRequest request) : previous_(std::move(t_current_request)) {
  t_current_request = std::move(request);
}

OptimizationProfileGuard::~OptimizationProfileGuard() { t_current_request = std::move(previous_); }

OptimizationProfileGuard OptimizationProfileGuard::automatic() {
  return OptimizationProfileGuard(ProfileRequest::automatic());
}

OptimizationProfileGuard OptimizationProfileGuard::named(std::string_view name) {
  return OptimizationProfileGuard(ProfileRequest::named(std::string(name)));
}

ProfileRequest OptimizationProfileGuard::current() { return t_current_request; }

}  // namespace gearbox
