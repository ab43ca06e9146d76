// The causal-mask recognizer (passes/SymbolicMask.h) against the block-of-rows
// evaluation (passes/AttentionMask.h evaluatedMaskFacts) on a few hundred
// masks that comparisons of shifted position ranges, And/Or/Not and
// Where/Max chains build, square and rectangular: wherever the recognizer
// reads a mask its facts equal the evaluation's, and it reads the forms
// exports write.
#include "ir/Parser.h"
#include "passes/AttentionMask.h"
#include "passes/SymbolicMask.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <sstream>

using namespace megac;

namespace {

// A graph whose value %m is a mask over qSeq queries and kvSeq keys, built from
// `body` (lines using %rows [qSeq, 1], %cols [1, kvSeq] and scalar constants).
std::unique_ptr<ir::Graph> maskGraph(int64_t qSeq, int64_t kvSeq, const std::string &body) {
  std::ostringstream s;
  s << "graph @m opset 20 {\n  %rows = const i64[" << qSeq << ",1] dense<[";
  for (int64_t i = 0; i < qSeq; ++i) s << (i ? ", " : "") << i;
  s << "]>\n  %cols = const i64[1," << kvSeq << "] dense<[";
  for (int64_t j = 0; j < kvSeq; ++j) s << (j ? ", " : "") << j;
  s << "]>\n";
  for (int c = -3; c <= 3; ++c) s << "  %c" << (c < 0 ? "m" : "") << std::abs(c) << " = const i64[] dense<" << c << ">\n";
  s << "  %zero = const f32[] dense<0>\n  %ninf = const f32[] dense<-inf>\n  %fmin = const f32[] dense<-3.4028235e+38>\n";
  s << body << "  return %m\n}\n";
  auto g = ir::parseGraph(s.str());
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError()) << "\n" << s.str();
    return nullptr;
  }
  return std::move(*g);
}

std::string describe(const std::optional<passes::MaskFacts> &f) {
  if (!f) return "none";
  return std::string("causal ") + (f->causal ? "1" : "0") + ", all visible " + (f->allVisible ? "1" : "0") +
         ", fully masked row " + (f->fullyMaskedRow ? "1" : "0");
}

// The recognizer's facts, checked against the evaluation; whether it read the mask.
bool agrees(int64_t qSeq, int64_t kvSeq, const std::string &body, bool additive) {
  auto g = maskGraph(qSeq, kvSeq, body);
  if (!g) return false;
  const ir::ValueId m = g->lookup("m");
  const passes::MaskKind kind{!additive};
  passes::PassOptions opts;
  const auto sym = passes::symbolicMaskFacts(*g, m, kind, qSeq, kvSeq);
  const auto eval = passes::evaluatedMaskFacts(*g, m, kind, qSeq, kvSeq, opts);
  if (!sym) return false;
  SCOPED_TRACE(body);
  if (eval) { // the evaluation stops (none) at a row neither causal nor all visible
    EXPECT_EQ(describe(sym), describe(eval)) << qSeq << " x " << kvSeq;
  } else {
    EXPECT_FALSE(sym->causal || sym->allVisible) << describe(sym);
  }
  return true;
}

std::string offset(int c) { return c < 0 ? "%cm" + std::to_string(-c) : "%c" + std::to_string(c); }

TEST(MaskRecognizer, AgreesWithTheEvaluationOnRandomMasks) {
  std::mt19937 rng(7);
  const char *cmps[] = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"};
  int read = 0, total = 0;
  for (auto [q, kv] : {std::pair<int64_t, int64_t>{6, 6}, {1, 1}, {3, 6}, {6, 3}}) {
    for (int n = 0; n < 120; ++n) {
      std::ostringstream b;
      // Two comparisons of shifted ranges (sometimes of rows against rows: a function of i alone).
      for (int t = 0; t < 2; ++t) {
        const int c = int(rng() % 7) - 3;
        const bool swap = rng() % 2, rowsOnly = rng() % 6 == 0;
        b << "  %s" << t << " = Add(" << (rowsOnly ? "%rows" : "%cols") << ", " << offset(c) << ") : i64["
          << (rowsOnly ? std::to_string(q) + ",1" : "1," + std::to_string(kv)) << "]\n";
        const std::string x = "%s" + std::to_string(t), y = "%rows";
        const std::string shape = rowsOnly ? std::to_string(q) + ",1" : std::to_string(q) + "," + std::to_string(kv);
        b << "  %b" << t << " = " << cmps[rng() % 5] << "(" << (swap ? y : x) << ", " << (swap ? x : y) << ") : bool["
          << shape << "]\n";
      }
      const std::string full = std::to_string(q) + "," + std::to_string(kv);
      const char *join[] = {"And", "Or", "Xor"};
      b << "  %j = " << join[rng() % 3] << "(%b0, %b1) : bool[" << full << "]\n";
      const bool negate = rng() % 4 == 0, additive = rng() % 2;
      b << "  %k = " << (negate ? "Not(%j)" : "Identity(%j)") << " : bool[" << full << "]\n";
      if (additive)
        b << "  %w = Where(%k, %zero, " << (rng() % 2 ? "%ninf" : "%fmin") << ") : f32[" << full
          << "]\n  %m = Max(%w, %fmin) : f32[" << full << "]\n";
      else
        b << "  %m = Identity(%k) : bool[" << full << "]\n";
      ++total;
      read += agrees(q, kv, b.str(), additive);
    }
  }
  // Every one of these is a step function of j - i (rows against shifted rows: a constant).
  std::printf("mask recognizer: %d of %d random masks read, each as the evaluation reads it\n", read, total);
  EXPECT_EQ(read, total) << read << " of " << total << " read";
}

// What transformers exports: kv_idx <= q_idx, and-ed with all-true padding, to
// 0 / the lowest float; and the same causal mask built from Trilu of ones.
TEST(MaskRecognizer, ReadsTheExportedForms) {
  EXPECT_TRUE(agrees(8, 8,
                     "  %yes = const bool[] dense<1>\n  %le = LessOrEqual(%cols, %rows) : bool[8,8]\n"
                     "  %and = And(%yes, %le) : bool[8,8]\n  %m = Where(%and, %zero, %fmin) : f32[8,8]\n",
                     true));
  auto g = maskGraph(8, 8,
                     "  %shape = const i64[2] dense<[8, 8]>\n"
                     "  %ones = ConstantOfShape(%shape) {value = tensor f32[1] dense<1>} : f32[8,8]\n"
                     "  %tri = Trilu(%ones) {upper = 0} : f32[8,8]\n  %m = Cast(%tri) {to = 9} : bool[8,8]\n");
  ASSERT_TRUE(g);
  auto f = passes::symbolicMaskFacts(*g, g->lookup("m"), passes::MaskKind{true}, 8, 8);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->causal && !f->allVisible && !f->fullyMaskedRow) << describe(f);
  // Strictly below the diagonal (Trilu k = -1): query 0 sees nothing.
  g = maskGraph(8, 8,
                "  %shape = const i64[2] dense<[8, 8]>\n"
                "  %ones = ConstantOfShape(%shape) {value = tensor f32[1] dense<1>} : f32[8,8]\n"
                "  %tri = Trilu(%ones, %cm1) {upper = 0} : f32[8,8]\n  %m = Cast(%tri) {to = 9} : bool[8,8]\n");
  ASSERT_TRUE(g);
  f = passes::symbolicMaskFacts(*g, g->lookup("m"), passes::MaskKind{true}, 8, 8);
  ASSERT_TRUE(f);
  EXPECT_TRUE(!f->causal && !f->allVisible && f->fullyMaskedRow) << describe(f);
}

// Not read (the caller evaluates them): a product of two ranges, a padding
// row that is no step function of j - i, an op that is not elementwise.
TEST(MaskRecognizer, LeavesOtherMasksToTheEvaluation) {
  for (const char *body : {"  %p = Mul(%cols, %rows) : i64[6,6]\n  %m = Less(%p, %c3) : bool[6,6]\n",
                           "  %pad = const bool[1,6] dense<[0, 1, 1, 1, 1, 1]>\n  %le = LessOrEqual(%cols, %rows) : "
                           "bool[6,6]\n  %m = And(%le, %pad) : bool[6,6]\n",
                           "  %le = LessOrEqual(%cols, %rows) : bool[6,6]\n  %m = Transpose(%le) {perm = ints[1, 0]} : "
                           "bool[6,6]\n"}) {
    auto g = maskGraph(6, 6, body);
    ASSERT_TRUE(g);
    EXPECT_FALSE(passes::symbolicMaskFacts(*g, g->lookup("m"), passes::MaskKind{true}, 6, 6)) << body;
  }
}

} // namespace
