// Smoke test for the executorch 1.5.1 wheel's C++ SDK: backend registration
// and the Module extension. Prints "sdk ok" on success.
#include <executorch/extension/module/module.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>

namespace et = ::executorch::runtime;

namespace {

class NullBackend final : public et::BackendInterface {
 public:
  bool is_available() const override { return true; }

  et::Result<et::DelegateHandle*> init(et::BackendInitContext& /*context*/, et::FreeableBuffer* /*processed*/,
                                       et::ArrayRef<et::CompileSpec> /*compile_specs*/) const override {
    return et::Error::NotSupported;
  }

  et::Error execute(et::BackendExecutionContext& /*context*/, et::DelegateHandle* /*handle*/,
                    et::Span<et::EValue*> /*args*/) const override {
    return et::Error::NotSupported;
  }
};

NullBackend g_backend;

}  // namespace

int main() {
  et::runtime_init();

  const et::Error reg = et::register_backend(et::Backend{"GearboxSdkCheck", &g_backend});
  std::printf("register_backend: %s\n", et::to_string(reg));
  if (reg != et::Error::Ok || et::get_backend_class("GearboxSdkCheck") != &g_backend) {
    std::printf("backend registration FAILED\n");
    return 1;
  }
  const size_t n = et::get_num_registered_backends();
  std::printf("registered backends: %zu\n", n);
  for (size_t i = 0; i < n; ++i) {
    auto name = et::get_backend_name(i);
    std::printf("  [%zu] %s\n", i, name.ok() ? name.get() : "?");
  }

  executorch::extension::Module module("/nonexistent/gearbox_sdk_check.pte");
  const et::Error load = module.load();
  std::printf("Module::load(/nonexistent/...): %s (0x%x)\n", et::to_string(load), static_cast<unsigned>(load));
  if (load == et::Error::Ok) {
    std::printf("unexpected: load of nonexistent file succeeded\n");
    return 1;
  }

  std::printf("sdk ok\n");
  return 0;
}
