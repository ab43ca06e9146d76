#include "codegen/MachineProfile.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include <map>

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static std::map<std::string, double MachineProfile::*> profileKeys() {
  return {
      {"pcie_h2d_gbps", &MachineProfile::pcieH2dGBps},
      {"pcie_d2h_gbps", &MachineProfile::pcieD2hGBps},
      {"pcie_both_gbps", &MachineProfile::pcieBothGBps},
      {"pcie_pageable_h2d_gbps", &MachineProfile::pciePageableH2dGBps},
      {"gemm_bf16_tflops", &MachineProfile::gemmBf16Tflops},
      {"gemm_tf32_tflops", &MachineProfile::gemmTf32Tflops},
      {"gemm_fp32_tflops", &MachineProfile::gemmFp32Tflops},
      {"host_mem_gbps", &MachineProfile::hostMemGBps},
      {"cpu_adamw_params_per_s", &MachineProfile::cpuAdamwParamsPerS},
      {"gpu_mem_gib", &MachineProfile::gpuMemGiB},
      {"gpu_mem_free_gib", &MachineProfile::gpuMemFreeGiB},
      {"gpu_hbm_gbps", &MachineProfile::gpuHbmGBps},
      {"attention_bf16_tflops", &MachineProfile::attentionBf16Tflops},
      {"attention_bf16_ps_per_elem", &MachineProfile::attentionBf16PsPerElem},
      {"cpu_adamw_under_dma_params_per_s", &MachineProfile::cpuAdamwUnderDmaParamsPerS},
      {"pcie_both_under_adamw_gbps", &MachineProfile::pcieBothUnderAdamwGBps},
      {"gpus", &MachineProfile::gpus},
      {"pcie_all_gpus_both_gbps", &MachineProfile::pcieAllGpusBothGBps},
  };
}

llvm::Expected<MachineProfile> parseMachineProfile(llvm::StringRef text, llvm::StringRef source) {
  MachineProfile mp;
  mp.description = source.str();
  const auto keys = profileKeys();
  std::map<std::string, int> seenAt; // key -> line
  llvm::StringRef rest = text;
  for (int lineNo = 1; !rest.empty(); ++lineNo) {
    auto [line, tail] = rest.split('\n');
    rest = tail;
    line = line.trim();
    llvm::StringRef where = source;
    auto fail = [&](const llvm::Twine &m) { return err(where + ":" + llvm::Twine(lineNo) + ": " + m); };
    if (line.consume_front("#")) {
      llvm::StringRef comment = line.trim();
      if (comment.consume_front("megac machine profile:")) mp.description = comment.trim().str();
      continue;
    }
    if (line.empty()) continue;
    auto [key, value] = line.split('=');
    key = key.trim();
    value = value.trim();
    if (!line.contains('=') || key.empty()) return fail("expected `key = value`, got '" + line + "'");
    auto it = keys.find(key.str());
    if (it == keys.end()) return fail("unknown key '" + key + "'");
    double v = 0;
    if (value.getAsDouble(v) || !(v > 0)) return fail(key + " must be a positive number, got '" + value + "'");
    if (key == "gpus" && v != double(int64_t(v))) return fail("gpus must be a whole number, got '" + value + "'");
    if (seenAt.count(key.str())) return fail(key + " is given twice (also on line " + llvm::Twine(seenAt[key.str()]) + ")");
    seenAt[key.str()] = lineNo;
    mp.*(it->second) = v;
  }
  for (const auto &kv : keys) {
    if (seenAt.count(kv.first) || kv.first == "gpu_hbm_gbps" || kv.first == "attention_bf16_tflops") continue;
    // Not measured on that machine: no host-memory contention modelled, and
    // the attention rate (if given) includes its work beyond the flops.
    if (kv.first == "cpu_adamw_under_dma_params_per_s" || kv.first == "pcie_both_under_adamw_gbps" ||
        kv.first == "attention_bf16_ps_per_elem" || kv.first == "pcie_all_gpus_both_gbps")
      mp.*(kv.second) = 0;
    else if (kv.first == "gpus")
      mp.gpus = 1;
    else return err(source + ": the profile does not give " + kv.first);
  }
  return mp;
}

llvm::Expected<MachineProfile> readMachineProfile(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf) return err(path + ": cannot read the machine profile: " + buf.getError().message());
  return parseMachineProfile((*buf)->getBuffer(), path);
}

} // namespace megac::plan
