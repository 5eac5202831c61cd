"""Names shared with the C++ delegate (include/gearbox/executorch/backend.h)."""

# The backend id the partitioner writes into the .pte; libgearbox_executorch registers it.
BACKEND_ID = "GearboxBackend"

# Compile specs the runtime reads.
SPEC_DEFAULT_PROFILE = "gearbox.default_profile"  # "automatic" | "index:N" | "name:NAME"
SPEC_DEVICE = "gearbox.device"  # "cpu" | "cuda" | "auto"
SPEC_CONTEXT = "gearbox.context"  # handles with the same key share one execution context

# Compile specs only the export reads (the runtime skips keys with this prefix).
SPEC_BUILD_PREFIX = "gearbox.build."
SPEC_BUILD_PROFILES = "gearbox.build.profiles"  # JSON [[name, min, opt, max], ...] over seq
SPEC_BUILD_DEVICE = "gearbox.build.device"  # the device tactics are timed on at export
