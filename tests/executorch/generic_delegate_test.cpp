// Programs of plain aten ops lowered to gearbox's generic IR ops (an SDPA block reading a
// bool mask, an encoder layer), exported by tests/executorch/make_generic_programs.py and
// run by ExecuTorch's Module on the CPU device against eager PyTorch.
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gearbox/executorch/backend.h"
#include "module_fixture.h"

namespace {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::extension::Module;

constexpr SizesType kWidth = 32;
constexpr float kTolerance = 1e-4f;  // per element: atol + rtol * |want|

void run_cases(const std::string& name) {
  ASSERT_TRUE(gearbox::testing::device_chosen());
  ASSERT_TRUE(gearbox::executorch::register_backend().ok());
  Module m(gearbox::testing::program_path(name + ".pte"));
  for (const nlohmann::json& c : gearbox::testing::reference("generic_reference.json")[name]) {
    const auto t = c["length"].get<SizesType>();
    std::vector<executorch::runtime::EValue> args;
    auto x = executorch::extension::make_tensor_ptr({1, t, kWidth}, c["x"].get<std::vector<float>>());
    args.emplace_back(x);
    executorch::extension::TensorPtr mask;
    if (!c["mask"].empty()) {
      std::vector<uint8_t> bytes;
      for (int v : c["mask"].get<std::vector<int>>()) bytes.push_back(static_cast<uint8_t>(v != 0));
      mask = executorch::extension::make_tensor_ptr({1, 1, t, t}, std::move(bytes), ScalarType::Bool);
      args.emplace_back(mask);
    }
    auto r = m.execute("forward", args);
    ASSERT_TRUE(r.ok()) << name << " at length " << t << ": error " << static_cast<int>(r.error());
    const auto& got = (*r)[0].toTensor();
    const std::vector<float> want = c["want"].get<std::vector<float>>();
    ASSERT_EQ(got.dim(), 3);
    ASSERT_EQ(got.size(1), t);
    ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
    const float* data = got.const_data_ptr<float>();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(data[i])) << name << " at length " << t << ", element " << i;
      ASSERT_LE(std::fabs(data[i] - want[i]), kTolerance + kTolerance * std::fabs(want[i]))
          << name << " at length " << t << ", element " << i;
    }
  }
}

TEST(GenericDelegate, SdpaBlockWithABoolMaskMatchesEager) { run_cases("masked"); }

TEST(GenericDelegate, EncoderLayerMatchesEager) { run_cases("encoder"); }

}  // namespace
