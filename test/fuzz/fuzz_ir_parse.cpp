// IR text -> ir::parseGraph; where it parses, the verifier, and the
// round trip ir/Printer.h promises: the printed graph parses back and prints
// the same text (a mismatch aborts: a finding).
#include "FuzzUtil.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto g = ir::parseGraph(text, "fuzz.mir");
  if (!g) {
    fuzz::discard(g);
    return 0;
  }
  fuzz::discard(ir::verifyGraph(**g));
  std::string printed = ir::graphToString(**g);
  auto again = ir::parseGraph(printed, "printed.mir");
  if (!again) {
    std::fprintf(stderr, "printed IR does not parse back: %s\n--- printed:\n%s\n",
                 llvm::toString(again.takeError()).c_str(), printed.c_str());
    std::abort();
  }
  std::string reprinted = ir::graphToString(**again);
  if (reprinted != printed) {
    std::fprintf(stderr, "IR round trip differs\n--- first:\n%s\n--- second:\n%s\n", printed.c_str(),
                 reprinted.c_str());
    std::abort();
  }
  return 0;
}
