// The host-memory check before the host state is allocated or pinned: the
// plan's bill against what the machine has (MemAvailable, the cgroup).
#include "FixtureTestUtil.h"

#include "runtime/train/HostMemory.h"

#include <gtest/gtest.h>

using namespace megac;
using namespace megac::runtime;
using megac::testing::compileFixturePlan;

TEST(HostMemory, ReadsWhatThisMachineHas) {
  HostMemory m = readHostMemory();
  EXPECT_GT(m.memAvailable, int64_t(1) << 20) << "MemAvailable from /proc/meminfo";
  EXPECT_GT(m.available(), 0);
  EXPECT_LE(m.available(), m.memAvailable);
}

TEST(HostMemory, APlanPastWhatIsAvailableIsRefusedWithItsBill) {
  plan::Plan p = compileFixturePlan("llama");
  auto bill = hostBill(p);
  ASSERT_TRUE(bool(bill)) << llvm::toString(bill.takeError());
  EXPECT_EQ(bill->masterWeights, bill->adamMoments / 2);
  EXPECT_FALSE(bool(checkHostMemory(p, {bill->total(), -1})));
  EXPECT_FALSE(bool(checkHostMemory(p, {-1, -1}))); // nothing known: nothing to compare
  std::string e = llvm::toString(checkHostMemory(p, {bill->total() - 1, -1}));
  EXPECT_NE(e.find("the plan needs 0.00 GiB of host memory, and this machine has 0.00 GiB available (MemAvailable "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("Nothing was allocated"), std::string::npos) << e;
  // The CPU stream executor's simulated GPU memory is billed beside the rest, by name.
  EXPECT_FALSE(bool(checkHostMemory(p, {bill->total() + 4096, -1}, 4096)));
  e = llvm::toString(checkHostMemory(p, {bill->total(), -1}, 4096));
  EXPECT_NE(e.find("the plan's GPU memory simulated by the CPU backend"), std::string::npos) << e;
  EXPECT_NE(e.find("--cpu-direct"), std::string::npos) << e;
  // The cgroup's limit counts where it is the smaller.
  e = llvm::toString(checkHostMemory(p, {int64_t(1) << 40, 1000}));
  EXPECT_NE(e.find("left under the cgroup's limit"), std::string::npos) << e;
}
