#include "runtime/weights/HfExport.h"

#include "runtime/core/CheckedSize.h"
#include "runtime/core/Safetensors.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/NonFinite.h"
#include "runtime/weights/WeightFiles.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <regex>
#include <set>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

namespace megac::runtime {

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static std::string join(const std::string &a, const std::string &b) {
  llvm::SmallString<256> p(a);
  path::append(p, b);
  return std::string(p);
}

// The metadata of every file written: save_pretrained's, and a marker that
// tells a later export the directory is one it may replace.
static const std::map<std::string, std::string> kShardMetadata = {{"format", "pt"}, {"megac", "hf-export"}};
static constexpr const char *kIndexName = "model.safetensors.index.json";

// --- sizes and shards ---

llvm::Expected<uint64_t> parseShardSize(llvm::StringRef text) {
  auto bad = [&](const llvm::Twine &why) { return err("--max-shard-size '" + text + "': " + why); };
  llvm::StringRef s = text.trim();
  size_t digits = 0;
  while (digits < s.size() && llvm::isDigit(s[digits])) ++digits;
  if (digits == 0) return bad("expected a size in bytes with an optional unit: 5GB, 500MB, 100KB, 2GiB");
  uint64_t n = 0;
  if (s.substr(0, digits).getAsInteger(10, n)) return bad("too large");
  llvm::StringRef unit = s.substr(digits).trim();
  if (unit.size() > 1 && unit.back() == 'b')
    return bad("a lowercase 'b' means bits to save_pretrained; write bytes as 'B' (5GB)");
  static const struct {
    const char *name;
    uint64_t scale;
  } kUnits[] = {{"", 1},          {"B", 1},          {"KB", 1000ull},    {"MB", 1000000ull},
                {"GB", 1000000000ull}, {"TB", 1000000000000ull}, {"KIB", 1ull << 10}, {"MIB", 1ull << 20},
                {"GIB", 1ull << 30},   {"TIB", 1ull << 40}};
  std::string upper = unit.upper();
  for (const auto &u : kUnits)
    if (upper == u.name) {
      if (n == 0) return bad("must be positive");
      if (n > UINT64_MAX / u.scale) return bad("too large");
      return n * u.scale;
    }
  return bad("unknown unit '" + unit + "' (B, KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: of 1024)");
}

std::vector<std::vector<size_t>> splitShards(const std::vector<uint64_t> &bytes, uint64_t maxShardBytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t currentBytes = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > maxShardBytes) {
      shards.push_back({i});
      continue;
    }
    if (currentBytes + bytes[i] > maxShardBytes) {
      shards.push_back(std::move(current));
      current.clear();
      currentBytes = 0;
    }
    current.push_back(i);
    currentBytes += bytes[i];
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

// --- names ---

static std::vector<llvm::StringRef> components(llvm::StringRef name) {
  llvm::SmallVector<llvm::StringRef, 8> parts;
  name.split(parts, '.');
  return std::vector<llvm::StringRef>(parts.begin(), parts.end());
}

// (prefix of the parameter's name, prefix of the tensor's) around the longest
// run of dotted components the two names end with; nothing where they share none.
static std::optional<std::pair<std::string, std::string>> rewriteOf(llvm::StringRef param, llvm::StringRef tensor) {
  auto p = components(param), t = components(tensor);
  size_t k = 0;
  while (k < p.size() && k < t.size() && p[p.size() - 1 - k] == t[t.size() - 1 - k]) ++k;
  if (k == 0) return std::nullopt;
  auto prefix = [k](const std::vector<llvm::StringRef> &c) {
    std::string s;
    for (size_t i = 0; i + k < c.size(); ++i) s += c[i].str() + ".";
    return s;
  };
  return std::make_pair(prefix(p), prefix(t));
}

static bool exporterGenerated(llvm::StringRef name) {
  static const llvm::Regex generated("^val_[0-9]+$");
  return generated.match(name) || name.startswith("onnx::");
}

static std::string quoteList(const std::vector<std::string> &names, size_t limit = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > limit) s += ", ...";
  return s;
}

llvm::Expected<std::vector<std::string>> hfNames(const std::vector<std::string> &params,
                                                 const std::map<std::string, std::string> &recorded,
                                                 std::string &how) {
  std::vector<std::string> names(params.size());
  std::vector<std::string> generated;
  for (const std::string &p : params)
    if (exporterGenerated(p) && !recorded.count(p)) generated.push_back(p);
  if (!generated.empty())
    return err(llvm::Twine(generated.size()) + " of the " + llvm::Twine(params.size()) +
               " parameters have names the ONNX exporter generated (" + quoteList(generated) +
               ") and no Hugging Face name was recorded for them: torch.onnx.export(dynamo=True) optimizes by "
               "default, which renames weights and stores Linear weights transposed, so they cannot be written "
               "under Hugging Face's names. Export the model with tools/export_shapes_only.py (or "
               "optimize=False), train it from the Hugging Face weights (megac run --weights DIR), and export "
               "that checkpoint; `megac export -o` writes this one as ONNX");

  size_t fromRecord = 0;
  std::vector<size_t> unrecorded;
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = recorded.find(params[i]);
    if (it != recorded.end()) {
      names[i] = it->second;
      ++fromRecord;
    } else {
      unrecorded.push_back(i);
    }
  }
  llvm::raw_string_ostream os(how);
  if (fromRecord == 0) {
    for (size_t i = 0; i < params.size(); ++i) names[i] = params[i];
    os << "the parameters' own names";
  } else {
    os << "the names recorded at load";
    if (!unrecorded.empty()) {
      // The rewrite from parameter to tensor name that most recorded pairs share.
      std::map<std::pair<std::string, std::string>, size_t> votes;
      for (const auto &[p, t] : recorded)
        if (auto r = rewriteOf(p, t)) ++votes[*r];
      std::pair<std::string, std::string> rule;
      size_t best = 0;
      for (const auto &[r, n] : votes)
        if (n > best) best = n, rule = r;
      std::vector<std::string> lost;
      for (size_t i : unrecorded) {
        llvm::StringRef p = params[i];
        if (best == 0 || !p.startswith(rule.first)) lost.push_back(params[i]);
        else names[i] = rule.second + p.drop_front(rule.first.size()).str();
      }
      if (!lost.empty())
        return err(llvm::Twine(lost.size()) + " parameters took no tensor when the weights were loaded (" +
                   quoteList(lost) + ") and their Hugging Face names cannot be told from the others'");
      os << "; " << unrecorded.size() << " parameters that took no tensor (--init-missing) named as the others: ";
      if (rule.first == rule.second) os << "unchanged";
      else if (rule.second.empty()) os << "the prefix '" << rule.first << "' removed";
      else os << "'" << rule.first << "' -> '" << rule.second << "'";
    }
  }
  bool wrapped = !names.empty() && std::all_of(names.begin(), names.end(), [](const std::string &n) {
    return llvm::StringRef(n).startswith("m.") && n.size() > 2;
  });
  if (wrapped) {
    for (std::string &n : names) n = n.substr(2);
    os << ", with the export wrapper's prefix 'm.' removed";
  }
  os.flush();
  generated.clear();
  for (const std::string &n : names)
    if (exporterGenerated(n)) generated.push_back(n);
  if (!generated.empty())
    return err("the names recorded at load include names the ONNX exporter generated (" + quoteList(generated) +
               "): the weights came from an optimized ONNX export, which renames weights and stores Linear "
               "weights transposed; train from the Hugging Face weights (megac run --weights DIR) to export them");
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) return err("parameter '" + params[i] + "' would be written without a name");
    auto [it, fresh] = seen.insert({names[i], i});
    if (!fresh)
      return err("parameters '" + params[it->second] + "' and '" + params[i] + "' would both be written as '" +
                 names[i] + "'");
  }
  return names;
}

// --- config.json ---

std::string setConfigDType(llvm::StringRef json, llvm::StringRef dtype, std::string &was) {
  static const std::regex key(R"re("(torch_dtype|dtype)"(\s*:\s*)"(float32|float16|bfloat16|float64)")re");
  was.clear();
  std::string in = json.str(), out;
  auto begin = std::sregex_iterator(in.begin(), in.end(), key), end = std::sregex_iterator();
  size_t last = 0;
  for (auto it = begin; it != end; ++it) {
    const std::smatch &m = *it;
    out.append(in, last, size_t(m.position(0)) - last);
    if (m[3].str() != dtype.str() && was.empty()) was = m[3].str();
    out += "\"" + m[1].str() + "\"" + m[2].str() + "\"" + dtype.str() + "\"";
    last = size_t(m.position(0) + m.length(0));
  }
  out.append(in, last, std::string::npos);
  return out;
}

// Files of a Hugging Face model directory that describe the model rather
// than hold its weights: configuration, tokenizer, chat template, custom code.
static bool isConfigFile(llvm::StringRef n) {
  static const char *const kNames[] = {"config.json",      "generation_config.json", "special_tokens_map.json",
                                       "added_tokens.json", "merges.txt",             "preprocessor_config.json"};
  for (const char *k : kNames)
    if (n == k) return true;
  if (n.endswith(".safetensors") || n.endswith(".bin") || n.endswith(".pt") || n.endswith(".onnx") ||
      n.endswith(".index.json"))
    return false;
  return n.startswith("tokenizer") || n.startswith("vocab") || n.startswith("chat_template") || n.endswith(".model") ||
         n.endswith(".tiktoken") || n.endswith(".py");
}

static bool isWeightsFile(llvm::StringRef n) {
  static const llvm::Regex shard("^model-[0-9]{5}-of-[0-9]{5}\\.safetensors$");
  return n == "model.safetensors" || n == kIndexName || shard.match(n);
}

static llvm::Expected<std::string> readWholeFile(const std::string &file) {
  auto buf = llvm::MemoryBuffer::getFile(file, false, false);
  if (!buf) return err(file + ": cannot read: " + buf.getError().message());
  return (*buf)->getBuffer().str();
}

static bool isRegularFile(const std::string &p) {
  fs::file_status st;
  return !fs::status(p, st, /*follow=*/true) && st.type() == fs::file_type::regular_file;
}

// --- the output directory ---

// Whether `dir` (existing, not empty) is what a previous export wrote: only
// the files an export writes, and every safetensors file carrying its marker.
static llvm::Error checkReplaceable(const std::string &dir) {
  auto refuse = [&](const llvm::Twine &why) {
    return err(dir + ": exists and is not empty, and is not a previous megac export (" + why +
               "); give a new or empty directory");
  };
  std::error_code ec;
  std::vector<std::string> entries;
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    entries.push_back(path::filename(it->path()).str());
  if (ec) return err(dir + ": cannot list: " + ec.message());
  std::sort(entries.begin(), entries.end());
  int weights = 0;
  for (const std::string &name : entries) {
    const std::string file = join(dir, name);
    fs::file_status st;
    if (fs::status(file, st, /*follow=*/false) || st.type() != fs::file_type::regular_file)
      return refuse("'" + name + "' is not a regular file");
    if (!isWeightsFile(name) && !isConfigFile(name)) return refuse("it holds '" + name + "'");
    if (!llvm::StringRef(name).endswith(".safetensors")) continue;
    auto h = readSafetensorsHeader(file);
    if (!h) {
      llvm::consumeError(h.takeError());
      return refuse("'" + name + "' is not a safetensors file");
    }
    auto m = h->metadata.find("megac");
    if (m == h->metadata.end() || m->second != "hf-export") return refuse("'" + name + "' was not written by megac");
    ++weights;
  }
  if (weights == 0) return refuse("it holds no safetensors file");
  return llvm::Error::success();
}

// --- planning ---

namespace {
struct SourceChain {
  std::map<std::string, std::string> recorded; // parameter -> the name the weights had
  std::string source;                          // the last source followed ("" : the model file)
  std::string kind;                            // "Hugging Face safetensors", "ONNX", "megac checkpoint", "missing"
  std::string hfDir;                           // the Hugging Face directory, where the source is one
  std::string missingWhy;                      // why the source could not be opened
};
} // namespace

// Follows --weights back through megac checkpoints (a run started from
// another run's checkpoint records that checkpoint, whose own record says
// where its weights came from) to the first source that is not one.
static SourceChain followSource(const plan::CheckpointMeta &meta) {
  SourceChain c;
  for (const auto &n : meta.weight_names()) c.recorded[n.param()] = n.tensor();
  c.source = meta.weights_source();
  std::set<std::string> visited;
  for (int depth = 0; !c.source.empty() && depth < 32; ++depth) {
    auto kind = classifyWeightsPath(c.source);
    if (!kind) {
      c.kind = "missing";
      c.missingWhy = llvm::toString(kind.takeError());
      return c;
    }
    if (kind->format == WeightFormat::Safetensors) {
      c.kind = "Hugging Face safetensors";
      if (fs::is_directory(c.source)) c.hfDir = c.source;
      else {
        c.hfDir = path::parent_path(kind->path).str();
        if (c.hfDir.empty()) c.hfDir = ".";
      }
      return c;
    }
    if (kind->format == WeightFormat::Onnx) {
      c.kind = "ONNX";
      return c;
    }
    c.kind = "megac checkpoint";
    auto step = resolveCheckpoint(kind->path);
    if (!step) {
      llvm::consumeError(step.takeError());
      return c;
    }
    llvm::SmallString<256> real;
    if (fs::real_path(*step, real) || !visited.insert(std::string(real)).second) return c;
    auto prev = readCheckpointMeta(*step);
    if (!prev) {
      llvm::consumeError(prev.takeError());
      return c;
    }
    if (prev->weight_names_size() > 0) {
      std::map<std::string, std::string> before;
      for (const auto &n : prev->weight_names()) before[n.param()] = n.tensor();
      std::map<std::string, std::string> composed;
      for (const auto &[p, t] : c.recorded) {
        auto it = before.find(t);
        if (it != before.end()) composed[p] = it->second;
      }
      c.recorded = std::move(composed);
    }
    c.source = prev->weights_source();
    c.kind.clear();
  }
  return c;
}

llvm::Expected<HfExportPlan> planHfExport(const HfExportOptions &opts) {
  HfExportPlan plan;
  plan.opts = opts;
  if (opts.dtype != DType::F32 && opts.dtype != DType::BF16)
    return err("--dtype: the export writes fp32 or bf16");
  if (opts.maxShardBytes == 0) return err("--max-shard-size must be positive");
  if (opts.outDir.empty()) return err("--hf needs an output directory");

  // The checkpoint: metadata, params.f32 mapped, every parameter inside it.
  auto stepDir = resolveCheckpoint(opts.checkpoint);
  if (!stepDir) return stepDir.takeError();
  plan.stepDir = *stepDir;
  auto meta = readCheckpointMeta(plan.stepDir);
  if (!meta) return meta.takeError();
  plan.meta = std::move(*meta);
  const int64_t elements = plan.meta.host_elements();
  const std::string paramsFile = join(plan.stepDir, "params.f32");
  auto buf = llvm::MemoryBuffer::getFile(paramsFile, false, false);
  if (!buf) return err(paramsFile + ": cannot read: " + buf.getError().message());
  plan.params = std::move(*buf);
  if (elements < 0 || uint64_t(plan.params->getBufferSize()) != uint64_t(elements) * 4)
    return err(paramsFile + ": has " + llvm::Twine(plan.params->getBufferSize()) +
               " bytes, the checkpoint's metadata says " + llvm::Twine(elements) + " floats (truncated?)");
  if (plan.meta.params_size() == 0) return err(plan.stepDir + ": the checkpoint has no parameters");
  std::vector<std::string> paramNames;
  for (const auto &p : plan.meta.params()) {
    auto n = checkedNumel(p.shape(), elements);
    if (!n || p.host_offset() < 0 || p.host_offset() > elements - *n)
      return err(plan.stepDir + ": corrupt checkpoint metadata (parameter '" + p.name() + "' lies outside params.f32)");
    HfTensor t;
    t.param = p.name();
    t.shape.assign(p.shape().begin(), p.shape().end());
    t.numel = *n;
    t.hostOffset = p.host_offset();
    paramNames.push_back(p.name());
    plan.tensors.push_back(std::move(t));
  }

  // Names.
  SourceChain chain = followSource(plan.meta);
  std::string how;
  auto names = hfNames(paramNames, chain.recorded, how);
  if (!names) return err(plan.stepDir + ": cannot write Hugging Face names: " + llvm::toString(names.takeError()));
  for (size_t i = 0; i < plan.tensors.size(); ++i) plan.tensors[i].name = (*names)[i];
  {
    std::string line = "names: " + how;
    if (chain.kind == "missing")
      line += " (weights from " + chain.source + ", which is not there now)";
    else if (!chain.source.empty())
      line += " (weights from " + chain.source + ", " + chain.kind + ")";
    else if (plan.meta.weights_source().empty())
      line += " (the checkpoint records no weights source: its weights came from the model file)";
    else
      line += " (weights from " + plan.meta.weights_source() + ", a checkpoint whose weights came from its model file)";
    plan.report.push_back(line);
  }

  // A trained parameter that is NaN or infinite makes a model nobody can use.
  const float *host = reinterpret_cast<const float *>(plan.params->getBufferStart());
  for (const HfTensor &t : plan.tensors) {
    int64_t bad = firstNonFinite(host + t.hostOffset, t.numel);
    if (bad >= 0)
      return err(plan.stepDir + ": parameter '" + t.param + "' holds " + std::to_string(host[t.hostOffset + bad]) +
                 " at element " + llvm::Twine(bad) + ": the run diverged; export an earlier checkpoint");
  }

  // Tensors of the Hugging Face source that no parameter took (frozen
  // weights, a head the graph ties): said, since the export lacks them.
  if (!chain.hfDir.empty()) {
    if (auto src = openWeightSource(chain.source)) {
      std::set<std::string> written;
      for (const HfTensor &t : plan.tensors) written.insert(t.name);
      std::vector<std::string> absent;
      for (const SourceTensor &t : (*src)->tensors)
        if (!written.count(t.name)) absent.push_back(t.name);
      if (!absent.empty())
        plan.report.push_back("warning: " + std::to_string(absent.size()) + " tensors of " + chain.source +
                              " are not in the export (no parameter of the checkpoint holds them): " +
                              quoteList(absent, 20));
    } else {
      llvm::consumeError(src.takeError());
    }
  }

  // Shards: parameter order, as save_pretrained cuts its state dict.
  const uint64_t elemBytes = dtypeSize(opts.dtype);
  std::vector<uint64_t> bytes;
  for (const HfTensor &t : plan.tensors) bytes.push_back(uint64_t(t.numel) * elemBytes);
  auto groups = splitShards(bytes, opts.maxShardBytes);
  for (size_t s = 0; s < groups.size(); ++s) {
    HfShard shard;
    if (groups.size() == 1) {
      shard.file = "model.safetensors";
    } else {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, groups.size());
      shard.file = name;
    }
    shard.tensors = groups[s];
    std::sort(shard.tensors.begin(), shard.tensors.end(),
              [&](size_t a, size_t b) { return plan.tensors[a].name < plan.tensors[b].name; });
    for (size_t i : shard.tensors) shard.bytes += bytes[i];
    plan.totalBytes += shard.bytes;
    plan.shards.push_back(std::move(shard));
  }
  if (plan.shards.size() > 99999) return err("--max-shard-size: " + llvm::Twine(plan.shards.size()) +
                                             " shards is more than save_pretrained's names allow (99999)");

  // The configuration: --hf-config, else the Hugging Face directory the weights came from.
  plan.configDir = opts.configDir;
  if (plan.configDir.empty()) {
    if (!chain.hfDir.empty()) {
      plan.configDir = chain.hfDir;
    } else {
      std::string why;
      if (chain.kind == "missing")
        why = "the weights' source " + chain.source + " is not there (" + chain.missingWhy +
              ")";
      else if (chain.source.empty())
        why = "its weights came from the model file, not from a Hugging Face directory";
      else
        why = "its weights came from " + chain.source + " (" + chain.kind + "), not from a Hugging Face directory";
      return err(plan.stepDir + ": no Hugging Face configuration to export with: " + why +
                 ". from_pretrained needs config.json: pass --hf-config DIR (a directory holding the model's "
                 "config.json, and its tokenizer files)");
    }
  }
  if (!fs::is_directory(plan.configDir))
    return err(plan.configDir + ": --hf-config: not a directory");
  const std::string configJson = join(plan.configDir, "config.json");
  if (!isRegularFile(configJson))
    return err(plan.configDir + ": no config.json (from_pretrained needs it)" +
               (opts.configDir.empty() ? "; pass --hf-config DIR with the model's config.json" : ""));
  std::error_code ec;
  std::vector<std::string> files;
  for (fs::directory_iterator it(plan.configDir, ec), end; it != end && !ec; it.increment(ec)) {
    std::string name = path::filename(it->path()).str();
    if (isConfigFile(name) && isRegularFile(it->path())) files.push_back(name);
  }
  if (ec) return err(plan.configDir + ": cannot list: " + ec.message());
  std::sort(files.begin(), files.end());
  const char *torchDType = opts.dtype == DType::BF16 ? "bfloat16" : "float32";
  std::string dtypeWas;
  for (const std::string &name : files) {
    auto text = readWholeFile(join(plan.configDir, name));
    if (!text) return text.takeError();
    if (name == "config.json") {
      auto parsed = llvm::json::parse(*text);
      if (!parsed || !parsed->getAsObject()) {
        if (!parsed) llvm::consumeError(parsed.takeError());
        return err(configJson + ": not a JSON object");
      }
      *text = setConfigDType(*text, torchDType, dtypeWas);
    }
    plan.configFiles[name] = std::move(*text);
  }
  {
    std::string line = "config: from " + plan.configDir + ":";
    for (const std::string &name : files) line += " " + name;
    plan.report.push_back(line);
    if (!dtypeWas.empty())
      plan.report.push_back(std::string("config: config.json's dtype ") + dtypeWas + " -> " + torchDType +
                            " (the dtype written)");
  }

  // The output directory: new, empty, or a previous export (replaced).
  if (fs::exists(opts.outDir)) {
    if (!fs::is_directory(opts.outDir)) return err(opts.outDir + ": exists and is not a directory");
    fs::directory_iterator it(opts.outDir, ec);
    if (ec) return err(opts.outDir + ": cannot list: " + ec.message());
    if (it != fs::directory_iterator()) {
      if (auto e = checkReplaceable(opts.outDir)) return std::move(e);
      plan.replaces = true;
    }
  }
  return plan;
}

// --- writing ---

static llvm::Error writeAll(int fd, const char *p, size_t n, const std::string &file) {
  while (n) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return err(file + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
  return llvm::Error::success();
}

// Writes a new file through `body(fd)`, then fsyncs and closes it.
template <typename Body> static llvm::Error writeNewFile(const std::string &file, Body body) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return err(file + ": cannot create: " + std::strerror(errno));
  llvm::Error e = body(fd);
  if (!e && ::fsync(fd) != 0) e = err(file + ": fsync failed: " + std::strerror(errno));
  if (::close(fd) != 0 && !e) e = err(file + ": close failed: " + std::strerror(errno));
  return e;
}

static llvm::Error writeShard(const HfExportPlan &plan, const HfShard &shard, const std::string &file) {
  std::vector<SafetensorsEntry> entries;
  for (size_t i : shard.tensors) {
    SafetensorsEntry e;
    e.name = plan.tensors[i].name;
    e.dtype = plan.opts.dtype;
    e.shape = plan.tensors[i].shape;
    entries.push_back(std::move(e));
  }
  auto header = serializeSafetensorsHeader(entries, kShardMetadata);
  if (!header) return header.takeError();
  const float *host = reinterpret_cast<const float *>(plan.params->getBufferStart());
  return writeNewFile(file, [&](int fd) -> llvm::Error {
    if (auto e = writeAll(fd, header->data(), header->size(), file)) return e;
    std::vector<uint16_t> half;
    for (size_t i : shard.tensors) {
      const HfTensor &t = plan.tensors[i];
      const float *src = host + t.hostOffset;
      if (plan.opts.dtype == DType::F32) {
        if (auto e = writeAll(fd, reinterpret_cast<const char *>(src), size_t(t.numel) * 4, file)) return e;
        continue;
      }
      constexpr int64_t kChunk = 1 << 20;
      half.resize(size_t(std::min<int64_t>(t.numel, kChunk)));
      for (int64_t i0 = 0; i0 < t.numel; i0 += kChunk) {
        int64_t n = std::min(kChunk, t.numel - i0);
        for (int64_t j = 0; j < n; ++j) half[size_t(j)] = floatToBf16(src[i0 + j]);
        if (auto e = writeAll(fd, reinterpret_cast<const char *>(half.data()), size_t(n) * 2, file)) return e;
      }
    }
    return llvm::Error::success();
  });
}

// model.safetensors.index.json as save_pretrained writes it (json.dumps with
// indent=2 and sorted keys, then a newline).
static std::string indexJson(const HfExportPlan &plan) {
  int64_t parameters = 0;
  std::map<std::string, std::string> map;
  for (const HfShard &s : plan.shards)
    for (size_t i : s.tensors) {
      map[plan.tensors[i].name] = s.file;
      parameters += plan.tensors[i].numel;
    }
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "{\n  \"metadata\": {\n    \"total_parameters\": " << parameters << ",\n    \"total_size\": "
     << plan.totalBytes << "\n  },\n  \"weight_map\": {\n";
  size_t k = 0;
  for (const auto &[name, file] : map) {
    os << "    ";
    writeJsonString(os, name);
    os << ": ";
    writeJsonString(os, file);
    os << (++k < map.size() ? ",\n" : "\n");
  }
  os << "  }\n}\n";
  os.flush();
  return out;
}

static void fsyncDir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

llvm::Expected<std::string> writeHfExport(const HfExportPlan &plan) {
  llvm::SmallString<256> out(plan.opts.outDir);
  if (auto ec = fs::make_absolute(out)) return err(plan.opts.outDir + ": " + ec.message());
  path::remove_dots(out, /*remove_dot_dot=*/true);
  const std::string outDir(out);
  const std::string parent = path::parent_path(outDir).str(), base = path::filename(outDir).str();
  if (base.empty() || parent.empty()) return err(plan.opts.outDir + ": not a directory to write");
  if (auto ec = fs::create_directories(parent)) return err(parent + ": cannot create: " + ec.message());
  std::string tmpl = join(parent, "." + base + ".megac-tmp-XXXXXX");
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data())) return err(tmpl + ": cannot create: " + std::strerror(errno));
  const std::string tmp(name.data());
  ::chmod(tmp.c_str(), 0755);

  auto written = [&]() -> llvm::Error {
    for (const HfShard &s : plan.shards)
      if (auto e = writeShard(plan, s, join(tmp, s.file))) return e;
    if (plan.shards.size() > 1) {
      std::string index = indexJson(plan);
      if (auto e = writeNewFile(join(tmp, kIndexName),
                                [&](int fd) { return writeAll(fd, index.data(), index.size(), kIndexName); }))
        return e;
    }
    for (const auto &config : plan.configFiles) { // (a structured binding: clang 14 cannot capture one)
      const std::string &file = config.first, &bytes = config.second;
      if (auto e = writeNewFile(join(tmp, file), [&](int fd) { return writeAll(fd, bytes.data(), bytes.size(), file); }))
        return e;
    }
    fsyncDir(tmp);
    // Into place: a rename over a missing or empty directory; a previous
    // export is swapped with the new one in one step, then removed.
    if (::rename(tmp.c_str(), outDir.c_str()) == 0) return llvm::Error::success();
    if (errno != ENOTEMPTY && errno != EEXIST) return err(outDir + ": cannot rename into place: " + std::strerror(errno));
    if (auto e = checkReplaceable(outDir)) return e; // it changed since it was checked
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, outDir.c_str(), RENAME_EXCHANGE) == 0) return llvm::Error::success();
    if (errno != EINVAL && errno != ENOSYS)
      return err(outDir + ": cannot swap the previous export out: " + std::strerror(errno));
    std::string old = tmp + ".old";
    if (::rename(outDir.c_str(), old.c_str()) != 0)
      return err(outDir + ": cannot move the previous export away: " + std::strerror(errno));
    if (::rename(tmp.c_str(), outDir.c_str()) != 0) {
      std::string m = std::strerror(errno);
      ::rename(old.c_str(), outDir.c_str());
      return err(outDir + ": cannot rename into place: " + m);
    }
    fs::remove_directories(old);
    return llvm::Error::success();
  }();
  if (written) {
    fs::remove_directories(tmp);
    return std::move(written);
  }
  fs::remove_directories(tmp); // the previous export, after a swap; nothing otherwise
  fsyncDir(parent);

  int64_t parameters = 0;
  for (const HfTensor &t : plan.tensors) parameters += t.numel;
  std::string line;
  llvm::raw_string_ostream os(line);
  os << "wrote " << plan.opts.outDir << ": " << plan.tensors.size() << " tensors, " << parameters << " parameters, "
     << (plan.opts.dtype == DType::BF16 ? "BF16" : "F32") << ", " << plan.totalBytes << " bytes in ";
  if (plan.shards.size() == 1) os << plan.shards[0].file;
  else os << plan.shards.size() << " shards and " << kIndexName;
  os << "; " << plan.configFiles.size() << " configuration files";
  if (plan.replaces) os << " (replaced the previous export)";
  os.flush();
  return line;
}

} // namespace megac::runtime
