#include "runtime/train/Data.h"

#include <algorithm>

#include "llvm/Support/MemoryBuffer.h"

#include <cstring>

namespace megac::runtime {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static llvm::Error checkVocab(const std::string &path, const std::vector<uint32_t> &t, int64_t vocab) {
  for (size_t i = 0; i < t.size(); ++i)
    if (int64_t(t[i]) >= vocab)
      return err(path + ": token " + llvm::Twine(t[i]) + " at position " + llvm::Twine(i) +
                 " is outside the model's vocabulary of " + llvm::Twine(vocab));
  return llvm::Error::success();
}

llvm::Expected<TokenData> TokenData::openTokens(const std::string &path, int64_t vocab) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  const char *p = (*buf)->getBufferStart();
  size_t n = (*buf)->getBufferSize();
  TokenData d;
  d.path_ = path;
  int32_t header[3] = {0, 0, 0};
  if (n >= 1024) std::memcpy(header, p, sizeof header);
  size_t width = vocab > 65536 ? 4 : 2;
  size_t start = 0, count = 0;
  if (n >= 1024 && header[0] == 20240520) {
    if (header[1] != 1 && header[1] != 2)
      return err(path + ": llm.c token file of unknown version " + llvm::Twine(header[1]));
    width = header[1] == 1 ? 2 : 4;
    start = 1024;
    if (header[2] < 0)
      return err(path + ": llm.c header gives a negative token count (" + llvm::Twine(header[2]) + ")");
    count = size_t(header[2]);
    if (count > (n - start) / width)
      return err(path + ": llm.c header promises " + llvm::Twine(count) + " tokens, the file is shorter");
    d.format_ = width == 2 ? "llm.c, uint16" : "llm.c, uint32";
  } else {
    if (n % width)
      return err(path + ": size " + llvm::Twine(n) + " is not a multiple of " + llvm::Twine(width) +
                 " bytes (headerless " + (width == 2 ? "uint16" : "uint32") + " tokens expected)");
    count = n / width;
    d.format_ = width == 2 ? "uint16" : "uint32";
  }
  if (width == 2 && vocab > 65536)
    return err(path + ": uint16 tokens cannot address the model's vocabulary of " + llvm::Twine(vocab));
  d.tokens_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, p + start + 2 * i, 2);
      d.tokens_[i] = v;
    } else {
      std::memcpy(&d.tokens_[i], p + start + 4 * i, 4);
    }
  }
  if (auto e = checkVocab(path, d.tokens_, vocab)) return std::move(e);
  return d;
}

llvm::Expected<TokenData> TokenData::openText(const std::string &path, int64_t vocab) {
  if (vocab < 256)
    return err(path + ": --text reads bytes (256 values), but the model's vocabulary is " + llvm::Twine(vocab));
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  TokenData d;
  d.path_ = path;
  d.format_ = "text as bytes";
  llvm::StringRef s = (*buf)->getBuffer();
  d.tokens_.assign(s.bytes_begin(), s.bytes_end());
  return d;
}

llvm::Error TokenData::attachMask(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  if ((*buf)->getBufferSize() != tokens_.size())
    return err(path + ": a loss mask has one byte per token: " + llvm::Twine((*buf)->getBufferSize()) + " bytes, " +
               path_ + " has " + llvm::Twine(tokens_.size()) + " tokens");
  llvm::StringRef b = (*buf)->getBuffer();
  mask_.assign(b.bytes_begin(), b.bytes_end());
  if (mask_.size() < 2 || std::none_of(mask_.begin() + 1, mask_.end(), [](uint8_t m) { return m != 0; }))
    return err(path + ": the mask counts no token as a target");
  maskPath_ = path;
  return llvm::Error::success();
}

std::string TokenData::describe() const {
  std::string d = path_ + ": " + std::to_string(tokens_.size()) + " tokens (" + format_ + ")";
  if (hasMask())
    d += ", mask " + maskPath_ + " (" +
         std::to_string(std::count_if(mask_.begin(), mask_.end(), [](uint8_t m) { return m != 0; })) +
         " counted)";
  return d;
}

// splitmix64: a good 64-bit mix, so window starts are independent of each other.
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

llvm::Error TokenData::batch(uint64_t seed, int64_t index, int64_t batchSize, int64_t seq, Tensor &tokens,
                             Tensor &targets, int64_t ignoreIndex, int64_t *skipped) const {
  int64_t n = size();
  if (n < seq + 1)
    return err(path_ + ": " + llvm::Twine(n) + " tokens is shorter than one window of seq+1 = " +
               llvm::Twine(seq + 1) + " tokens");
  tokens = Tensor(DType::I64, {batchSize, seq});
  targets = Tensor(DType::I64, {batchSize, seq});
  uint64_t windows = uint64_t(n - seq); // valid start positions
  // A masked window with no counted target is drawn again, from its own
  // sequence of draws: the batch still depends on (seed, index) alone.
  constexpr int kMaxDraws = 1000;
  for (int64_t b = 0; b < batchSize; ++b) {
    uint64_t slot = mix(mix(seed) ^ uint64_t(index * batchSize + b));
    uint64_t start = slot % windows;
    for (int draw = 1; hasMask(); ++draw) {
      const uint8_t *m = mask_.data() + start + 1;
      if (std::any_of(m, m + seq, [](uint8_t x) { return x != 0; })) break;
      if (draw == kMaxDraws)
        return err(maskPath_ + ": " + llvm::Twine(kMaxDraws) + " windows of seq " + llvm::Twine(seq) +
                   " in a row hold no counted target: the mask is too sparse for this seq");
      if (skipped) ++*skipped;
      start = mix(slot ^ uint64_t(draw)) % windows;
    }
    int64_t *t = tokens.data<int64_t>() + b * seq, *y = targets.data<int64_t>() + b * seq;
    for (int64_t s = 0; s < seq; ++s) {
      t[s] = tokens_[start + uint64_t(s)];
      y[s] = hasMask() && !mask_[start + uint64_t(s) + 1] ? ignoreIndex : int64_t(tokens_[start + uint64_t(s) + 1]);
    }
  }
  return llvm::Error::success();
}

} // namespace megac::runtime
