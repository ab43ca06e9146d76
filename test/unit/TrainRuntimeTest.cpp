// Units of the training runtime: AdamW against torch's formula in double,
// the schedule, and the data formats.
#include "runtime/train/AdamW.h"
#include "runtime/train/Data.h"
#include "runtime/train/Schedule.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

using namespace megac;
using namespace megac::runtime;

TEST(AdamW, MatchesTorchFormulaOverSteps) {
  AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const int n = 37; // not a multiple of any vector width
  std::vector<float> p(n), m(n, 0), v(n, 0), g(n);
  std::vector<double> pr(n), mr(n, 0), vr(n, 0);
  for (int i = 0; i < n; ++i) p[i] = pr[i] = std::sin(i + 1.0f);
  for (int step = 1; step <= 5; ++step) {
    for (int i = 0; i < n; ++i) g[i] = std::cos(step * 0.7 + i);
    adamwUpdate(p.data(), g.data(), m.data(), v.data(), n, step, h, true);
    double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.95, step);
    for (int i = 0; i < n; ++i) {
      double gi = g[i];
      pr[i] *= 1 - 1e-2 * 0.1;
      mr[i] = 0.9 * mr[i] + 0.1 * gi;
      vr[i] = 0.95 * vr[i] + 0.05 * gi * gi;
      pr[i] -= 1e-2 / bc1 * mr[i] / (std::sqrt(vr[i]) / std::sqrt(bc2) + 1e-8);
    }
  }
  for (int i = 0; i < n; ++i) EXPECT_NEAR(p[i], pr[i], 1e-5) << i;
}

TEST(AdamW, NoDecayAndGradScale) {
  AdamWHyper h{0.1f, 0.9f, 0.999f, 1e-8f, 0.5f};
  float p = 1, m = 0, v = 0, g = 4;
  adamwUpdate(&p, &g, &m, &v, 1, 1, h, /*decay=*/false, /*gradScale=*/0.5f);
  // First step: m/bc1 = g', v/bc2 = g'^2, so the update is lr * sign(g).
  EXPECT_NEAR(p, 0.9f, 1e-6);
  EXPECT_NEAR(m, 0.2f, 1e-6); // (1 - 0.9) * (4 * 0.5)
}

// A unit's parameters in one split over the threads: the same numbers as
// one adamwUpdate per parameter, whatever the thread count and boundaries.
TEST(AdamW, SegmentsMatchOneUpdatePerParameter) {
  AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const int64_t sizes[] = {3, 70000, 1, 131072 + 5, 64, 600001}; // the last spans chunks
  int64_t total = 0;
  for (int64_t n : sizes) total += n + 7; // gaps between parameters stay untouched
  for (int threads : {1, 2, 5, 16}) {
    const size_t n = static_cast<size_t>(total);
    std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
    for (int64_t i = 0; i < total; ++i) {
      p[size_t(i)] = std::sin(float(i) * 0.1f);
      g[size_t(i)] = std::cos(float(i) * 0.3f);
    }
    std::vector<float> pr = p, mr = m, vr = v;
    std::vector<AdamWSegment> segs;
    int64_t at = 0;
    for (size_t k = 0; k < std::size(sizes); ++k) {
      bool decay = k % 2 == 0;
      segs.push_back({p.data() + at, g.data() + at, m.data() + at, v.data() + at, sizes[k], decay});
      adamwUpdate(pr.data() + at, g.data() + at, mr.data() + at, vr.data() + at, sizes[k], 3, h, decay);
      at += sizes[k] + 7;
    }
    adamwUpdateSegments(segs, 3, h, 1.0f, threads);
    EXPECT_EQ(p, pr) << threads << " threads";
    EXPECT_EQ(m, mr) << threads << " threads";
    EXPECT_EQ(v, vr) << threads << " threads";
  }
}

// Every instruction-set path this CPU has rounds exactly as the scalar one,
// whatever the alignment of each array (the AVX-512 path streams p, m and v
// where aligned and fall back to plain stores where not).
TEST(AdamW, EveryIsaMatchesScalarAtAnyAlignment) {
  AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const int64_t n = 1000;
  for (AdamWIsa isa : {AdamWIsa::Avx2, AdamWIsa::Avx512}) {
    if (!adamwIsaSupported(isa)) {
      std::printf("[ SKIPPED  ] AdamW ISA %d: not on this CPU\n", int(isa));
      continue;
    }
    for (int shift : {0, 1, 3, 8, 15}) {
      // p at offset 0..15 floats from a 64-byte boundary, m and v at other phases.
      alignas(64) static float p[1100], m[1100], v[1100], g[1100], pr[1100], mr[1100], vr[1100];
      for (int64_t i = 0; i < 1100; ++i) {
        p[i] = pr[i] = std::sin(float(i) * 0.37f);
        m[i] = mr[i] = 0.01f * std::cos(float(i));
        v[i] = vr[i] = 1e-4f * (1.5f + std::sin(float(i) * 0.11f));
        g[i] = std::cos(float(i) * 0.29f) * (i % 7 == 0 ? 1e-6f : 1.0f);
      }
      for (int64_t step = 2; step <= 3; ++step) {
        adamwUpdateIsa(isa, p + shift, g + 2, m + (shift + 1) % 16, v + shift, n, step, h, true, 0.5f);
        adamwUpdateIsa(AdamWIsa::Scalar, pr + shift, g + 2, mr + (shift + 1) % 16, vr + shift, n, step, h, true,
                       0.5f);
      }
      EXPECT_EQ(0, std::memcmp(p, pr, sizeof p)) << "ISA " << int(isa) << ", shift " << shift;
      EXPECT_EQ(0, std::memcmp(m, mr, sizeof m)) << "ISA " << int(isa) << ", shift " << shift;
      EXPECT_EQ(0, std::memcmp(v, vr, sizeof v)) << "ISA " << int(isa) << ", shift " << shift;
    }
  }
}

TEST(Schedule, WarmupThenCosineToMinLr) {
  plan::Optimizer o;
  o.set_lr(1.0f);
  o.set_min_lr(0.1f);
  o.set_warmup(10);
  o.set_schedule("cosine");
  EXPECT_FLOAT_EQ(learningRate(o, 1, 110), 0.1f);
  EXPECT_FLOAT_EQ(learningRate(o, 10, 110), 1.0f);
  EXPECT_NEAR(learningRate(o, 60, 110), 0.55f, 1e-6);
  EXPECT_NEAR(learningRate(o, 110, 110), 0.1f, 1e-6);
  o.set_schedule("constant");
  EXPECT_FLOAT_EQ(learningRate(o, 60, 110), 1.0f);
}

namespace {
std::string tempFile(const std::string &name, const std::string &bytes) {
  llvm::SmallString<128> dir;
  EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("megac-data", dir));
  std::string path = std::string(dir) + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}
} // namespace

TEST(Data, HeaderlessUint16WindowsAreShiftedByOne) {
  std::vector<uint16_t> toks(100);
  for (int i = 0; i < 100; ++i) toks[i] = uint16_t(i);
  auto d = TokenData::openTokens(tempFile("t.bin", std::string(reinterpret_cast<char *>(toks.data()), 200)), 256);
  ASSERT_TRUE(bool(d)) << llvm::toString(d.takeError());
  EXPECT_EQ(d->size(), 100);
  Tensor x, y;
  ASSERT_FALSE(bool(d->batch(3, 0, 4, 8, x, y)));
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t s = 0; s < 8; ++s) {
      EXPECT_EQ(y.data<int64_t>()[b * 8 + s], x.data<int64_t>()[b * 8 + s] + 1);
      if (s) {
        EXPECT_EQ(x.data<int64_t>()[b * 8 + s], x.data<int64_t>()[b * 8 + s - 1] + 1);
      }
    }
  // Deterministic in (seed, index); another index draws other windows.
  Tensor x2, y2, x3, y3;
  ASSERT_FALSE(bool(d->batch(3, 0, 4, 8, x2, y2)));
  ASSERT_FALSE(bool(d->batch(3, 1, 4, 8, x3, y3)));
  EXPECT_TRUE(x.identical(x2));
  EXPECT_FALSE(x.identical(x3));
}

TEST(Data, LlmcHeaderUint32AndErrors) {
  std::string bytes(1024, '\0');
  int32_t header[3] = {20240520, 2, 20};
  std::memcpy(&bytes[0], header, sizeof header);
  std::vector<uint32_t> toks(20, 70000);
  bytes += std::string(reinterpret_cast<char *>(toks.data()), 80);
  std::string path = tempFile("t.bin", bytes);
  auto d = TokenData::openTokens(path, 128256);
  ASSERT_TRUE(bool(d)) << llvm::toString(d.takeError());
  EXPECT_EQ(d->size(), 20);
  auto bad = TokenData::openTokens(path, 65536);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("token 70000 at position 0 is outside"), std::string::npos);
  Tensor x, y;
  auto e = d->batch(0, 0, 1, 20, x, y);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("shorter than one window"), std::string::npos);
}

TEST(Data, TextIsBytes) {
  auto d = TokenData::openText(tempFile("t.txt", "hello"), 256);
  ASSERT_TRUE(bool(d));
  EXPECT_EQ(d->size(), 5);
  auto small = TokenData::openText(tempFile("t.txt", "hello"), 100);
  ASSERT_FALSE(bool(small));
  llvm::consumeError(small.takeError());
}
