// Token file bytes (an llm.c header, or headerless uint16/uint32) ->
// runtime::TokenData::openTokens for a byte vocabulary (uint16 unless the
// llm.c header says otherwise) and a 100k one (uint32), then one batch of
// windows where the file opened.
#include "FuzzUtil.h"
#include "runtime/train/Data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  std::string path = fuzz::writeScratch("tokens.bin", data, size);
  for (int64_t vocab : {int64_t(256), int64_t(100000)}) {
    auto d = runtime::TokenData::openTokens(path, vocab);
    if (!d) {
      fuzz::discard(d);
      continue;
    }
    Tensor tokens, targets;
    fuzz::discard(d->batch(/*seed=*/1, /*index=*/0, /*batchSize=*/2, /*seq=*/4, tokens, targets));
  }
  return 0;
}
