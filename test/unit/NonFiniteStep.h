#pragma once
// A NaN in one unit's gradients stops the step before that unit's update:
// the error names the unit, the parameter and the element, and lists the
// units updated before it, and those alone have new weights. The NaN is
// injected (MEGAC_INJECT_NAN, runtime/train/NonFinite.h) into the llama
// fixture with its first two units resident (their AdamW on the backend's
// device), the others streamed; or (`gpuAdamw`) every unit streamed, the
// first two stepping on the device (their moments brought in and written
// back). One check for both backends (NonFiniteStepTest.cpp,
// test/gpu/GpuNonFiniteTest.cpp).
#include "FixtureTestUtil.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>

namespace megac::testing {

using TrainerFactory = std::function<llvm::Expected<std::unique_ptr<runtime::Trainer>>(const plan::Plan &)>;

inline void checkNanStopsTheStep(const TrainerFactory &make, bool gpuAdamw = false) {
  plan::Plan p = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, /*residentUnits=*/gpuAdamw ? 0 : 2, 0,
                                    /*gpuAdamwUnits=*/gpuAdamw ? 2 : 0);
  ASSERT_EQ(p.units_size(), 4);
  if (gpuAdamw)
    ASSERT_TRUE(p.units(0).adamw_on_gpu() && p.units(1).adamw_on_gpu() && !p.units(2).adamw_on_gpu());
  else
    ASSERT_TRUE(p.units(0).resident() && p.units(1).resident() && !p.units(2).resident());
  Tensor ids = loadRef("llama", "input_ids.pb"), targets = loadRef("llama", "targets.pb");
  // Backward order: head, layer.1 (streamed), layer.0, embed (on the device).
  struct Case {
    const char *unit;
    const char *updated; // the units whose update the step had applied
  };
  const Case cases[] = {{"head", ""},
                        {"layer.1", "unit 'head'"},
                        {"layer.0", "unit 'head', 'layer.1'"},
                        {"embed", "unit 'head', 'layer.1', 'layer.0'"}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.unit);
    ::setenv("MEGAC_INJECT_NAN", (std::string(c.unit) + "@2").c_str(), 1);
    auto t = withWeights(make(p), p);
    ::unsetenv("MEGAC_INJECT_NAN");
    ASSERT_TRUE(t);
    auto s1 = t->step({{ids, targets}}, 1e-2f); // step 1: clean
    ASSERT_TRUE(bool(s1)) << llvm::toString(s1.takeError());
    const runtime::HostState before = t->currentState();
    auto s2 = t->step({{ids, targets}}, 1e-2f);
    ASSERT_FALSE(bool(s2)) << "the NaN went unnoticed";
    std::string m = llvm::toString(s2.takeError());
    EXPECT_NE(m.find("unit '" + std::string(c.unit) + "' backward: the gradient of '"), std::string::npos) << m;
    EXPECT_NE(m.find(" at element 0"), std::string::npos) << m;
    EXPECT_NE(m.find("its update and the rest of the step were stopped"), std::string::npos) << m;
    if (*c.updated)
      EXPECT_NE(m.find("the AdamW update of " + std::string(c.updated) + " had already"), std::string::npos) << m;
    else
      EXPECT_EQ(m.find("had already been applied"), std::string::npos) << m;
    const runtime::HostState &after = t->currentState();
    for (int u = 0; u < p.units_size(); ++u) {
      const std::string name = p.units(u).name();
      const bool wasUpdated = *c.updated && std::string(c.updated).find("'" + name + "'") != std::string::npos;
      for (int32_t pid : p.units(u).parameters()) {
        const plan::Parameter &par = p.parameters(pid);
        const size_t off = size_t(par.host_offset()), bytes = size_t(par.numel()) * 4;
        const bool same = std::memcmp(after.params.data() + off, before.params.data() + off, bytes) == 0 &&
                          std::memcmp(after.v.data() + off, before.v.data() + off, bytes) == 0;
        EXPECT_EQ(same, !wasUpdated) << "unit '" << name << "', parameter '" << par.name() << "'";
      }
    }
  }
}

} // namespace megac::testing
