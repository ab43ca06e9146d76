// The version stamps of the CPU stream executor's simulated memory
// (runtime/stream/ShadowMemory.h): overlapping writes cut the older ranges,
// and a read names the first bytes that hold another stamp or none.
#include "runtime/stream/ShadowMemory.h"

#include <gtest/gtest.h>

using megac::stream::ShadowMemory;

TEST(ShadowMemory, WritesCutOlderRangesAndReadsNameWhatIsThere) {
  ShadowMemory m;
  EXPECT_EQ(m.check(0, 16, 1), "bytes [0, 16) were never written");
  m.write(0, 100, {1, "A"});
  EXPECT_EQ(m.check(0, 100, 1), "");
  EXPECT_EQ(m.check(10, 20, 1), "");
  EXPECT_EQ(m.check(90, 20, 1), "bytes [100, 110) were never written");
  m.write(40, 20, {2, "B"}); // inside A: A keeps [0, 40) and [60, 100)
  EXPECT_EQ(m.check(0, 40, 1), "");
  EXPECT_EQ(m.check(60, 40, 1), "");
  EXPECT_EQ(m.check(40, 20, 2), "");
  EXPECT_EQ(m.check(30, 20, 1), "bytes [40, 50) hold B");
  EXPECT_EQ(m.check(30, 40, 2), "bytes [30, 40) hold A");
  m.write(50, 60, {3, "C"}); // over B's tail and A's tail, past the end
  EXPECT_EQ(m.check(40, 10, 2), "");
  EXPECT_EQ(m.check(50, 60, 3), "");
  EXPECT_EQ(m.check(0, 110, 1), "bytes [40, 50) hold B");
  m.write(0, 200, {4, "D"}); // over everything
  EXPECT_EQ(m.check(0, 200, 4), "");
  EXPECT_EQ(m.check(199, 2, 4), "bytes [200, 201) were never written");
  EXPECT_EQ(m.check(5, 0, 9), ""); // nothing to read
}
