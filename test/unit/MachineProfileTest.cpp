// Machine profiles (codegen/MachineProfile.h): the committed H200
// profile parses to exactly the built-in default, and bad files are errors
// naming the line.
#include "codegen/CostModel.h"
#include "codegen/MachineProfile.h"

#include <gtest/gtest.h>

using namespace megac::plan;

namespace {
std::string errorOf(llvm::Expected<MachineProfile> p) {
  if (p) return "";
  return llvm::toString(p.takeError());
}

const char *kComplete = "pcie_h2d_gbps = 1\npcie_d2h_gbps = 2\npcie_both_gbps = 3\npcie_pageable_h2d_gbps = 4\n"
                        "gemm_bf16_tflops = 5\ngemm_tf32_tflops = 6\ngemm_fp32_tflops = 7\nhost_mem_gbps = 8\n"
                        "cpu_adamw_params_per_s = 9e9\ngpu_mem_gib = 80\ngpu_mem_free_gib = 79.5\n";
} // namespace

TEST(MachineProfile, CommittedH200ProfileIsTheBuiltInDefault) {
  auto p = readMachineProfile(std::string(MEGAC_TEST_DATA) + "/../../bench/h200.profile");
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  MachineProfile d;
  EXPECT_EQ(p->pcieH2dGBps, d.pcieH2dGBps);
  EXPECT_EQ(p->pcieD2hGBps, d.pcieD2hGBps);
  EXPECT_EQ(p->pcieBothGBps, d.pcieBothGBps);
  EXPECT_EQ(p->pciePageableH2dGBps, d.pciePageableH2dGBps);
  EXPECT_EQ(p->gemmBf16Tflops, d.gemmBf16Tflops);
  EXPECT_EQ(p->gemmTf32Tflops, d.gemmTf32Tflops);
  EXPECT_EQ(p->gemmFp32Tflops, d.gemmFp32Tflops);
  EXPECT_EQ(p->hostMemGBps, d.hostMemGBps);
  EXPECT_EQ(p->cpuAdamwParamsPerS, d.cpuAdamwParamsPerS);
  EXPECT_EQ(p->gpuMemGiB, d.gpuMemGiB);
  EXPECT_EQ(p->gpuMemFreeGiB, d.gpuMemFreeGiB);
  EXPECT_EQ(p->gpuHbmGBps, d.gpuHbmGBps);
  EXPECT_EQ(p->attentionBf16Tflops, d.attentionBf16Tflops);
  EXPECT_EQ(p->attentionBf16PsPerElem, d.attentionBf16PsPerElem);
  EXPECT_GT(d.attentionBf16PsPerElem, 0);
  EXPECT_EQ(p->cpuAdamwUnderDmaParamsPerS, d.cpuAdamwUnderDmaParamsPerS);
  EXPECT_EQ(p->pcieBothUnderAdamwGBps, d.pcieBothUnderAdamwGBps);
  EXPECT_GT(d.cpuAdamwUnderDmaParamsPerS, 0);
  EXPECT_EQ(p->description, "NVIDIA H200, 16 CPU threads");
  // 139.3 GiB
  EXPECT_EQ(d.usableGpuBytes(), int64_t(139.3 * 1073741824.0));
}

TEST(MachineProfile, ParsesEveryKey) {
  auto p = parseMachineProfile(std::string("# megac machine profile: test box\n\n") + kComplete + "# trailing note\n", "t");
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_EQ(p->description, "test box");
  EXPECT_EQ(p->pcieBothGBps, 3);
  EXPECT_EQ(p->cpuAdamwParamsPerS, 9e9);
  EXPECT_EQ(p->usableGpuBytes(), int64_t(79.5 * 1073741824.0));
  // Left out: no host-memory contention measured (not the built-in H200's),
  // and no attention work beyond the flops.
  EXPECT_EQ(p->cpuAdamwUnderDmaParamsPerS, 0);
  EXPECT_EQ(p->attentionBf16PsPerElem, 0);
  EXPECT_EQ(p->pcieBothUnderAdamwGBps, 0);
  EXPECT_EQ(p->gpus, 1);
  EXPECT_EQ(p->pcieAllGpusBothGBps, 0);
}

// Copies to and from every GPU at once (megac_profile on a machine with
// several): each of N GPUs copying at once keeps pcie_all_gpus_both_gbps / N
// of its rate, at most all of it; a count the profile did not measure has no
// share, and a prediction for it is an error that says what to measure.
TEST(MachineProfile, GpusCopyingAtOnceShareTheMeasuredRate) {
  auto p = parseMachineProfile(std::string(kComplete) + "gpus = 4\npcie_all_gpus_both_gbps = 6\n", "t");
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_EQ(p->gpus, 4);
  EXPECT_DOUBLE_EQ(gpuCopyShare(*p, 1), 1.0);
  EXPECT_DOUBLE_EQ(gpuCopyShare(*p, 2), 1.0); // 6 / 2 = 3: pcie_both_gbps, not more
  EXPECT_DOUBLE_EQ(gpuCopyShare(*p, 4), 0.5);
  EXPECT_EQ(gpuCopyShare(*p, 8), 0.0);
  auto r = costRates(*p, "bf16", 4);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_DOUBLE_EQ(r->h2dBytesPerS, 0.5e9);
  EXPECT_DOUBLE_EQ(r->bothBytesPerS, 1.5e9);
  auto none = costRates(*p, "bf16", 8);
  ASSERT_FALSE(bool(none));
  EXPECT_NE(llvm::toString(none.takeError()).find("did not measure copies to and from 8 GPUs at once"), std::string::npos);
  EXPECT_NE(errorOf(parseMachineProfile(std::string(kComplete) + "gpus = 1.5\n", "f")).find("gpus must be a whole number"),
            std::string::npos);
}

TEST(MachineProfile, BadFilesAreErrorsNamingTheLine) {
  std::string full = kComplete;
  EXPECT_NE(errorOf(parseMachineProfile(full + "pcie_gbps = 3\n", "f.profile")).find("f.profile:12: unknown key 'pcie_gbps'"),
            std::string::npos);
  EXPECT_NE(errorOf(parseMachineProfile(full + "gpu_mem_gib = 3\n", "f")).find("given twice (also on line 10)"),
            std::string::npos);
  EXPECT_NE(errorOf(parseMachineProfile("host_mem_gbps = fast\n", "f")).find("f:1: host_mem_gbps must be a positive number"),
            std::string::npos);
  EXPECT_NE(errorOf(parseMachineProfile("host_mem_gbps 3\n", "f")).find("f:1: expected `key = value`"), std::string::npos);
  EXPECT_NE(errorOf(parseMachineProfile("host_mem_gbps = 3\n", "f")).find("f: the profile does not give cpu_adamw_params_per_s"), std::string::npos);
  EXPECT_NE(errorOf(readMachineProfile("/nonexistent/x.profile")).find("cannot read the machine profile"), std::string::npos);
}
