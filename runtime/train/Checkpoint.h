#pragma once
// Checkpoints: DIR/step-NNNNNNNN/ with checkpoint.meta, params.f32,
// adam_m.f32, adam_v.f32, and DIR/latest naming the newest. Each file is
// written to a temporary name, fsynced and renamed; the step directory is
// renamed into place last, then `latest` is replaced atomically: a crash at
// any point leaves the previous checkpoint intact and `latest` pointing at a
// complete one.
//
// Format 2 (kCheckpointVersion) verifies what it loads: checkpoint.meta is
// the magic "MEGACCKP", a 16-byte header (format version u32, payload bytes
// u32, xxHash64 of the payload u64, little-endian) and the CheckpointMeta
// payload, which records each array file's checksum (xxHash64 over chunks of
// checksum_chunk_bytes, see checkpointArrayChecksum). Loading checks the
// checksums, then each parameter's values: finite, and adam_v >= 0. Format 1
// (the magic, then the payload; no checksums) still loads, with a warning
// that it is unverified.
#include "runtime/train/Trainer.h"

#include <functional>

namespace megac::runtime {

inline constexpr uint32_t kCheckpointVersion = 2; // 2: checksums of the meta and the arrays

struct CheckpointInfo {
  int64_t step = 0;
  int64_t totalSteps = 0;
  uint64_t seed = 0;
  int64_t dataIndex = 0;
  int64_t microBatchesPerStep = 1; // every GPU's
  int gpus = 1;                     // the plan's GPUs (1 in checkpoints before they were recorded)
  int64_t batch = 0;                // the plan's batch (0: not recorded)
  plan::Optimizer optimizer;
  // Where the run's initial weights came from (--weights; empty: the model
  // file), and which of the source's tensors each parameter took.
  std::string weightsSource;
  std::vector<std::pair<std::string, std::string>> weightNames;
};

// Writes the state into dir/step-<step>/ and points dir/latest at it; keeps
// the newest `keep` step directories (and always the one just written).
llvm::Error saveCheckpoint(const std::string &dir, const plan::Plan &plan, const HostState &state,
                           const CheckpointInfo &info, int keep = 2);

// Loads dir/latest (or dir itself when it is a step directory). The
// parameter names and shapes must match the plan's; the arrays are verified
// (verifyCheckpointArray) as they are read. `accept`, where given, sees the
// metadata before any array is read; an error from it ends the load.
llvm::Expected<CheckpointInfo> loadCheckpoint(const std::string &dir, const plan::Plan &plan, HostState &state,
                                              const std::function<llvm::Error(const CheckpointInfo &)> &accept = {});

// The step directory that dir/latest names (or dir itself when it holds a
// checkpoint.meta). `latest` must name a plain step-N directory of `dir`
// that resolves (symbolic links followed) inside `dir`.
llvm::Expected<std::string> resolveCheckpoint(const std::string &dir);

// Reads and verifies a step directory's checkpoint.meta (its checksum,
// format 2; a format-1 meta is accepted with a warning on stderr).
llvm::Expected<plan::CheckpointMeta> readCheckpointMeta(const std::string &stepDir);

// Verifies one array file of a step directory ("params.f32", "adam_m.f32"
// or "adam_v.f32") against its metadata: the size, the checksum (format 2),
// and every parameter's values (finite; adam_v >= 0). Errors name the file,
// the array and, for values, the parameter. With `dest` (host_elements
// floats) the verified array is also copied there, in the same pass.
llvm::Error verifyCheckpointArray(const std::string &stepDir, const plan::CheckpointMeta &meta, llvm::StringRef file,
                                  float *dest = nullptr);

// For readers that map params.f32 themselves (runtime/weights/WeightFiles.cpp): verifies the
// step directory's params.f32 against `meta` (as readCheckpointMeta returned
// it). One read of the file, chunks hashed and scanned in parallel.
inline llvm::Error verifyCheckpointParams(const std::string &stepDir, const plan::CheckpointMeta &meta) {
  return verifyCheckpointArray(stepDir, meta, "params.f32");
}

// Reads a checkpoint's parameter (or moment) array without a plan (export),
// verified as verifyCheckpointArray does.
llvm::Expected<std::vector<float>> readCheckpointArray(const std::string &stepDir, const plan::CheckpointMeta &meta,
                                                       llvm::StringRef file);

// checkpoint.meta's bytes for `meta` (the header with its checksum, then the
// payload), and the reverse; `path` names the file in errors. Exposed for tests.
std::string encodeCheckpointMeta(const plan::CheckpointMeta &meta);
llvm::Expected<plan::CheckpointMeta> decodeCheckpointMeta(llvm::StringRef bytes, const std::string &path);

// The checksum of an array file's bytes: xxHash64 of the little-endian
// xxHash64s of its consecutive `chunkBytes` chunks (the last may be short),
// the chunks hashed in parallel.
uint64_t checkpointArrayChecksum(const char *data, uint64_t size, uint64_t chunkBytes);

} // namespace megac::runtime
