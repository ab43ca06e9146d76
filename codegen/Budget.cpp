#include "codegen/Budget.h"

#include "runtime/plan/HostBill.h"
#include "runtime/plan/PlanLabels.h"
#include "runtime/plan/StreamLayout.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <iterator>
#include <map>

namespace megac::codegen {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

// "123456 bytes (0.12 GiB)"
static std::string bytesText(int64_t b) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << b << " bytes (" << llvm::format("%.2f", double(b) / double(int64_t(1) << 30)) << " GiB)";
  return os.str();
}

llvm::Error checkHostBudget(const plan::Plan &p, int64_t hostBudgetBytes) {
  auto h = plan::hostBill(p);
  if (!h) return h.takeError();
  if (h->total() <= hostBudgetBytes) return llvm::Error::success();
  return err("the plan needs " + bytesText(h->total()) + " of host memory, more than --host-mem " +
             bytesText(hostBudgetBytes) + ": fp32 master weights " + llvm::Twine(h->masterWeights) +
             ", AdamW moments " + llvm::Twine(h->adamMoments) + ", step gradients " + llvm::Twine(h->gradients) +
             ", pinned staging " + llvm::Twine(h->pinnedStaging) +
             (h->pinnedCheckpoints ? ", offloaded checkpoints " + std::to_string(h->pinnedCheckpoints) : std::string()) +
             (h->bf16Weights ? ", bf16 weights to stream " + std::to_string(h->bf16Weights) : std::string()) + " bytes");
}

bool fitsHostBudget(const plan::Plan &p, int64_t hostBudgetBytes) {
  if (hostBudgetBytes <= 0) return true;
  llvm::Error e = checkHostBudget(p, hostBudgetBytes);
  const bool fits = !e;
  llvm::consumeError(std::move(e));
  return fits;
}

int64_t largestFitting(int64_t below, const std::function<bool(int64_t)> &fits) {
  int64_t lo = 0, hi = below; // fits(lo) is taken as true (none), fits(hi) as false
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

llvm::Error overBudgetError(const plan::Plan &p, const DeviceBytesAt &deviceBytesAt,
                            const LongestSeqBelow &longestSeq) {
  const plan::StreamSchedule &s = p.schedule();
  const int64_t budget = s.gpu_budget_bytes();
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << "the plan needs " << bytesText(s.device_bytes()) << " of GPU memory at batch " << p.batch() << " x seq "
     << p.seq() << "; the budget (--gpu-mem) is " << bytesText(budget) << "\n";
  // Bytes by category (checkpoints and activation gradients share bytes
  // where their lifetimes allow, so these may sum to more than the total).
  std::map<int, std::pair<int, int64_t>> byKind; // kind -> (regions, bytes)
  for (const plan::DeviceRegion &r : s.regions()) {
    auto &k = byKind[r.kind()];
    k.first += 1;
    k.second += r.bytes();
  }
  for (const auto &[kind, nb] : byKind)
    os << "  " << plan::deviceCategoryName(plan::DeviceRegion::Kind(kind)) << ": " << bytesText(nb.second) << " in "
       << nb.first << (nb.first == 1 ? " region\n" : " regions\n");
  os << "  (checkpoints and activation gradients share bytes where their lifetimes allow)\n";
  auto fits = [&](int64_t batch, int64_t seq) {
    auto bytes = deviceBytesAt(batch, seq);
    if (!bytes) {
      llvm::consumeError(bytes.takeError());
      return false;
    }
    return *bytes <= budget;
  };
  int64_t batch = largestFitting(p.batch(), [&](int64_t b) { return fits(b, p.seq()); });
  SeqThatFits seq;
  if (longestSeq) {
    auto found = longestSeq(p.seq());
    if (!found) return found.takeError();
    seq = *found;
  } else {
    seq.seq = largestFitting(p.seq(), [&](int64_t q) { return fits(p.batch(), q); });
  }
  os << "largest batch that fits at seq " << p.seq() << ": ";
  if (batch > 0) os << batch << "\n";
  else os << "none (batch 1 does not fit)\n";
  os << "largest seq that fits at batch " << p.batch() << ": ";
  if (seq.seq > 0) os << seq.seq << seq.how;
  else os << "none (seq " << (longestSeq ? "64" : "1") << " does not fit)";
  return err(os.str());
}

} // namespace megac::codegen
