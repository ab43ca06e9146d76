#pragma once
// `megac export CHECKPOINT --hf OUT_DIR`: a checkpoint's trained parameters
// as a directory that Hugging Face's from_pretrained loads, written as
// save_pretrained writes one:
// - model.safetensors, or shards model-0000i-of-0000N.safetensors cut at
//   --max-shard-size the way save_pretrained cuts them (in parameter order, a
//   new shard where the next tensor would pass the limit, a tensor larger than
//   the limit alone) with model.safetensors.index.json ("metadata":
//   total_size and total_parameters, "weight_map"), each file's metadata
//   {"format": "pt"} (plus "megac": "hf-export", which marks the directory as
//   an export that a later export may replace);
// - tensors under the names the weights had where the run loaded them
//   (`megac run --weights`: the checkpoint records each parameter's tensor),
//   in their shapes (Linear weights [out, in]); a tied embedding and head is
//   one parameter and so one tensor, under the name it had in the source
//   (save_pretrained keeps model.embed_tokens.weight and drops lm_head.weight);
// - config.json (its dtype set to what is written), generation_config.json,
//   tokenizer files and custom code copied from a Hugging Face directory:
//   --hf-config, else the one the weights were loaded from.
// Names, shapes, the configuration and the output directory are all checked
// before anything is written; the files are written into a temporary
// directory beside OUT_DIR, fsynced, and renamed into place.
#include "runtime/core/Tensor.h"

#include "plan.pb.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace megac::runtime {

struct HfExportOptions {
  std::string checkpoint;  // checkpoint directory (its `latest` is followed) or step directory
  std::string outDir;
  std::string configDir;   // --hf-config; empty: the Hugging Face directory the weights came from
  DType dtype = DType::F32; // F32 or BF16 (rounded to nearest even)
  uint64_t maxShardBytes = 5000000000ull; // --max-shard-size (save_pretrained's default "5GB")
};

struct HfTensor {
  std::string name;  // the Hugging Face name written
  std::string param; // the checkpoint's parameter
  Shape shape;
  int64_t numel = 0;
  int64_t hostOffset = 0; // in params.f32, elements
};

struct HfShard {
  std::string file;            // "model.safetensors" or "model-00001-of-00003.safetensors"
  std::vector<size_t> tensors; // indices into HfExportPlan::tensors, in name order (the file's order)
  uint64_t bytes = 0;          // tensor data
};

struct HfExportPlan {
  HfExportOptions opts;
  std::string stepDir;
  plan::CheckpointMeta meta;
  std::unique_ptr<llvm::MemoryBuffer> params; // params.f32, mapped
  std::vector<HfTensor> tensors;              // checkpoint (parameter) order
  std::vector<HfShard> shards;
  uint64_t totalBytes = 0;
  std::string configDir;
  std::map<std::string, std::string> configFiles; // file name -> bytes to write (config.json edited)
  bool replaces = false;                          // OUT_DIR is a previous export, replaced
  std::vector<std::string> report;                // lines to print: names, configuration, notes
};

// Everything decided and checked, nothing written.
llvm::Expected<HfExportPlan> planHfExport(const HfExportOptions &opts);

// Writes the plan's directory; the line to print ("wrote DIR: ...").
llvm::Expected<std::string> writeHfExport(const HfExportPlan &plan);

// --- the pieces, for tests ---

// "5GB" (10^9), "500MB", "100KB", "2GiB" (2^30), "123" (bytes): save_pretrained's spellings.
llvm::Expected<uint64_t> parseShardSize(llvm::StringRef text);

// Tensors of `bytes` each, in order, cut into shards as save_pretrained cuts
// them: a tensor larger than the limit alone, else a new shard where the next
// tensor would take the current one past the limit. Each shard: its tensors' indices.
std::vector<std::vector<size_t>> splitShards(const std::vector<uint64_t> &bytes, uint64_t maxShardBytes);

// Each parameter's Hugging Face name, from the names recorded at load
// (`recorded`: parameter -> the source's tensor; a parameter without one,
// initialized by --init-missing, takes the rewrite most recorded pairs share,
// e.g. the prefix 'm.' removed), else the parameter's own name; then the
// prefix 'm.' (the wrapper of tools/export_shapes_only.py and export_hf.py)
// removed where every name has it. Names the ONNX exporter generates
// (val_N: an optimized export, weights renamed and transposed) are an error,
// as are two parameters with one name. `how` says what was done.
llvm::Expected<std::vector<std::string>> hfNames(const std::vector<std::string> &params,
                                                 const std::map<std::string, std::string> &recorded,
                                                 std::string &how);

// config.json with each "torch_dtype"/"dtype" that names a float type set to
// `dtype` ("float32", "bfloat16"); the text is otherwise unchanged. `was`
// gets the value replaced ("" where nothing changed).
std::string setConfigDType(llvm::StringRef json, llvm::StringRef dtype, std::string &was);

} // namespace megac::runtime
