#include "runtime/train/HostMemory.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace megac::runtime {

int64_t HostMemory::available() const {
  if (memAvailable < 0) return cgroupLeft;
  if (cgroupLeft < 0) return memAvailable;
  return std::min(memAvailable, cgroupLeft);
}

static int64_t readNumber(const char *path) {
  auto buf = llvm::MemoryBuffer::getFileAsStream(path);
  if (!buf) return -1;
  int64_t v = -1;
  if ((*buf)->getBuffer().trim().getAsInteger(10, v)) return -1; // "max": no limit
  return v;
}

HostMemory readHostMemory() {
  HostMemory m;
  if (auto buf = llvm::MemoryBuffer::getFileAsStream("/proc/meminfo")) {
    llvm::SmallVector<llvm::StringRef, 64> lines;
    (*buf)->getBuffer().split(lines, '\n');
    for (llvm::StringRef l : lines)
      if (l.consume_front("MemAvailable:")) {
        llvm::StringRef v = l.trim();
        int64_t kb = 0;
        if (v.consume_back("kB") && !v.trim().getAsInteger(10, kb)) m.memAvailable = kb * 1024;
      }
  }
  // procfs and sysfs files report no size: read as streams. cgroup v2, then v1 (a v1 "no limit" is a huge number: ignored past the machine's memory).
  int64_t limit = readNumber("/sys/fs/cgroup/memory.max"), used = readNumber("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = readNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = readNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    if (limit >= (int64_t(1) << 60)) limit = -1;
  }
  if (limit >= 0) m.cgroupLeft = std::max<int64_t>(0, limit - std::max<int64_t>(used, 0));
  return m;
}

static std::string gib(int64_t b) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.2f GiB", double(b) / double(int64_t(1) << 30));
  return os.str();
}

llvm::Error checkHostMemory(const plan::Plan &plan, const HostMemory &mem, int64_t simulatedDeviceBytes) {
  const int64_t have = mem.available();
  if (have < 0) return llvm::Error::success(); // nothing to compare with
  auto bill = plan::hostBill(plan);
  if (!bill) return bill.takeError();
  bill->simulatedDevice = simulatedDeviceBytes;
  if (bill->total() <= have) return llvm::Error::success();
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << "the plan needs " << gib(bill->total()) << " of host memory, and this machine has " << gib(have)
     << " available (";
  if (mem.memAvailable >= 0) os << "MemAvailable " << gib(mem.memAvailable);
  if (mem.cgroupLeft >= 0) os << (mem.memAvailable >= 0 ? ", " : "") << "left under the cgroup's limit " << gib(mem.cgroupLeft);
  os << "): fp32 master weights " << gib(bill->masterWeights) << ", AdamW moments " << gib(bill->adamMoments);
  if (bill->gradients) os << ", step gradients " << gib(bill->gradients) << " (--clip or --grad-accum)";
  if (bill->pinnedStaging) os << ", pinned gradient staging " << gib(bill->pinnedStaging);
  if (bill->pinnedCheckpoints)
    os << ", offloaded checkpoints " << gib(bill->pinnedCheckpoints) << " (--offload-checkpoints; they grow with batch x seq)";
  if (bill->bf16Weights) os << ", bf16 weights to stream " << gib(bill->bf16Weights) << " (--bf16-weight-stream)";
  if (bill->simulatedDevice)
    os << ", the plan's GPU memory simulated by the CPU backend " << gib(bill->simulatedDevice)
       << " (--cpu-direct runs without it; a smaller --gpu-mem or --resident-units 0 shrinks it)";
  os << ". Nothing was allocated. The bill is the model's parameters (12 bytes each";
  if (bill->gradients) os << ", 16 with --clip or --grad-accum";
  os << ")" << (bill->pinnedCheckpoints ? " and the offloaded checkpoints" : ", whatever the batch or seq")
     << ": run on a machine with more memory, or train fewer parameters (--frozen)";
  os.flush();
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

} // namespace megac::runtime
