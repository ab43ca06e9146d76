#pragma once
// Files a model or checkpoint names (external data, safetensors shards)
// must stay inside the directory that names them: the check is on the
// resolved path, so a link inside the directory that points outside it (at
// /etc/passwd, say) is refused too.
#include "llvm/Support/Error.h"

#include <string>

namespace megac {

// Checks that `file` resolves inside `dir`, or, in a Hugging Face cache
// (models--NAME/snapshots/REV/, whose files link to ../../blobs/), inside
// models--NAME. `what` says what the file is, for the error.
llvm::Error checkInsideDirectory(const std::string &dir, const std::string &file, const std::string &what);

} // namespace megac
