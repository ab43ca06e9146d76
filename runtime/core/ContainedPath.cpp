#include "runtime/core/ContainedPath.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace megac {

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Error checkInsideDirectory(const std::string &dir, const std::string &file, const std::string &what) {
  llvm::SmallString<256> realDir, realFile;
  if (auto ec = fs::real_path(dir, realDir)) return err(dir + ": " + ec.message());
  if (auto ec = fs::real_path(file, realFile)) return err(file + ": " + what + ": " + ec.message());
  // A Hugging Face cache: .../models--NAME/snapshots/REV/FILE links to ../../blobs/HASH.
  std::string root(realDir);
  llvm::StringRef rev = path::filename(realDir), snaps = path::parent_path(realDir);
  if (!rev.empty() && path::filename(snaps) == "snapshots" &&
      path::filename(path::parent_path(snaps)).startswith("models--"))
    root = std::string(path::parent_path(snaps));
  if (!llvm::StringRef(realFile).startswith(root + "/"))
    return err(file + ": " + what + " resolves to " + std::string(realFile) + ", outside " + root);
  return llvm::Error::success();
}

} // namespace megac
