#pragma once
// Shared by the libFuzzer targets (test/fuzz/README.md): a private scratch
// directory for the readers that take a path, and error disposal. A reader's
// error is the expected answer to fuzzed bytes; a finding is a crash, a
// sanitizer report, a leak, an allocation past -malloc_limit_mb, an RSS past
// -rss_limit_mb or a run past -timeout.
#include "llvm/Support/Error.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <unistd.h>

namespace megac::fuzz {

// One empty directory per process (so that names a fuzzed file gives, such
// as a model's external data, find nothing beside it), removed at a clean exit.
class Scratch {
public:
  static Scratch &get() {
    static Scratch s;
    return s;
  }
  // Writes the bytes to <dir>/name (replacing it); returns the path.
  std::string write(const std::string &name, const uint8_t *data, size_t size) {
    std::string path = dir_ + "/" + name;
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
      std::perror(("megac fuzz: " + path).c_str());
      std::abort();
    }
    written_.insert(path);
    return path;
  }
  const std::string &dir() const { return dir_; }
  ~Scratch() {
    for (const std::string &p : written_) ::unlink(p.c_str());
    ::rmdir(dir_.c_str());
  }

private:
  Scratch() {
    const char *tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/megac-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("megac fuzz: mkdtemp");
      std::abort();
    }
    dir_ = tmpl;
  }
  std::string dir_;
  std::set<std::string> written_;
};

inline std::string writeScratch(const std::string &name, const uint8_t *data, size_t size) {
  return Scratch::get().write(name, data, size);
}

// Protobuf logs every string field that is not UTF-8 and parses on; fuzzed
// bytes make thousands of such lines. Silenced before the first input.
inline const bool kProtobufQuiet = (google::protobuf::SetLogHandler(nullptr), true);

// Errors are consumed, not printed.
inline void discard(llvm::Error e) { llvm::consumeError(std::move(e)); }
template <typename T> void discard(llvm::Expected<T> &e) {
  if (!e) llvm::consumeError(e.takeError());
}

} // namespace megac::fuzz
