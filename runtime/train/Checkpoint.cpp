#include "runtime/train/Checkpoint.h"

#include "runtime/core/TensorFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace megac::runtime {

namespace fs = llvm::sys::fs;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static constexpr char kMagic[8] = {'M', 'E', 'G', 'A', 'C', 'C', 'K', 'P'};
static constexpr uint32_t kCheckpointVersion = 1;

static std::string join(const std::string &a, const std::string &b) {
  llvm::SmallString<256> p(a);
  llvm::sys::path::append(p, b);
  return std::string(p);
}

static llvm::Error fsyncDir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return err(dir + ": " + std::strerror(errno));
  ::fsync(fd);
  ::close(fd);
  return llvm::Error::success();
}

static llvm::Error writeArray(const std::string &path, const std::vector<float> &v) {
  return writeFileAtomically(path, llvm::StringRef(reinterpret_cast<const char *>(v.data()), v.size() * 4));
}

llvm::Error saveCheckpoint(const std::string &dir, const plan::Plan &plan, const HostState &state,
                           const CheckpointInfo &info, int keep) {
  if (auto ec = fs::create_directories(dir)) return err(dir + ": cannot create: " + ec.message());
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(info.step));
  std::string final = join(dir, name), tmp = join(dir, std::string(".tmp-") + name);
  fs::remove_directories(tmp);
  if (auto ec = fs::create_directories(tmp)) return err(tmp + ": cannot create: " + ec.message());
  plan::CheckpointMeta meta;
  meta.set_format_version(kCheckpointVersion);
  meta.set_step(info.step);
  meta.set_total_steps(info.totalSteps);
  meta.set_seed(info.seed);
  meta.set_data_index(info.dataIndex);
  meta.set_micro_batches_per_step(info.microBatchesPerStep);
  meta.set_host_elements(int64_t(state.params.size()));
  meta.set_model_path(plan.model_path());
  *meta.mutable_optimizer() = info.optimizer;
  meta.set_weights_source(info.weightsSource);
  for (const auto &[param, tensor] : info.weightNames) {
    auto *n = meta.add_weight_names();
    n->set_param(param);
    n->set_tensor(tensor);
  }
  for (const plan::Parameter &p : plan.parameters()) {
    auto *mp = meta.add_params();
    mp->set_name(p.name());
    mp->mutable_shape()->CopyFrom(p.type().shape());
    mp->set_host_offset(p.host_offset());
  }
  std::string bytes(kMagic, sizeof kMagic);
  meta.AppendToString(&bytes);
  if (auto e = writeArray(join(tmp, "params.f32"), state.params)) return e;
  if (auto e = writeArray(join(tmp, "adam_m.f32"), state.m)) return e;
  if (auto e = writeArray(join(tmp, "adam_v.f32"), state.v)) return e;
  if (auto e = writeFileAtomically(join(tmp, "checkpoint.meta"), bytes)) return e;
  if (auto e = fsyncDir(tmp)) return e;
  fs::remove_directories(final);
  if (auto ec = fs::rename(tmp, final)) return err(final + ": cannot rename into place: " + ec.message());
  if (auto e = writeFileAtomically(join(dir, "latest"), std::string(name) + "\n")) return e;
  if (auto e = fsyncDir(dir)) return e;
  // Keep the newest `keep` step directories.
  std::vector<std::string> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    std::string base = std::string(llvm::sys::path::filename(it->path()));
    if (llvm::StringRef(base).startswith("step-")) steps.push_back(it->path());
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; keep > 0 && i + size_t(keep) < steps.size(); ++i) fs::remove_directories(steps[i]);
  return llvm::Error::success();
}

llvm::Expected<std::string> resolveCheckpoint(const std::string &dir) {
  if (fs::exists(join(dir, "checkpoint.meta"))) return dir;
  auto latest = llvm::MemoryBuffer::getFile(join(dir, "latest"));
  if (!latest) return err(dir + ": not a checkpoint directory (no 'latest' and no checkpoint.meta)");
  std::string step = (*latest)->getBuffer().trim().str();
  std::string p = join(dir, step);
  if (!fs::exists(join(p, "checkpoint.meta"))) return err(p + ": checkpoint named by 'latest' is missing");
  return p;
}

llvm::Expected<plan::CheckpointMeta> readCheckpointMeta(const std::string &stepDir) {
  std::string path = join(stepDir, "checkpoint.meta");
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  llvm::StringRef data = (*buf)->getBuffer();
  if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    return err(path + ": not a megac checkpoint");
  plan::CheckpointMeta meta;
  if (!meta.ParseFromArray(data.data() + sizeof kMagic, int(data.size() - sizeof kMagic)))
    return err(path + ": corrupt checkpoint metadata");
  if (meta.format_version() != kCheckpointVersion)
    return err(path + ": checkpoint format version " + llvm::Twine(meta.format_version()) + " is not supported");
  return meta;
}

llvm::Expected<std::vector<float>> readCheckpointArray(const std::string &stepDir, const std::string &file,
                                                       int64_t elements) {
  std::string path = join(stepDir, file);
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  if ((*buf)->getBufferSize() != size_t(elements) * 4)
    return err(path + ": has " + llvm::Twine((*buf)->getBufferSize()) + " bytes, expected " +
               llvm::Twine(elements * 4) + " (truncated?)");
  std::vector<float> v(static_cast<size_t>(elements));
  std::memcpy(v.data(), (*buf)->getBufferStart(), v.size() * 4);
  return v;
}

llvm::Expected<CheckpointInfo> loadCheckpoint(const std::string &dir, const plan::Plan &plan, HostState &state) {
  auto stepDir = resolveCheckpoint(dir);
  if (!stepDir) return stepDir.takeError();
  auto meta = readCheckpointMeta(*stepDir);
  if (!meta) return meta.takeError();
  if (meta->params_size() != plan.parameters_size())
    return err(*stepDir + ": checkpoint has " + llvm::Twine(meta->params_size()) + " parameters, the plan has " +
               llvm::Twine(plan.parameters_size()));
  for (int i = 0; i < plan.parameters_size(); ++i) {
    const auto &mp = meta->params(i);
    const auto &pp = plan.parameters(i);
    bool same = mp.name() == pp.name() && mp.host_offset() == pp.host_offset() &&
                mp.shape_size() == pp.type().shape_size() &&
                std::equal(mp.shape().begin(), mp.shape().end(), pp.type().shape().begin());
    if (!same) return err(*stepDir + ": parameter '" + mp.name() + "' does not match the plan's '" + pp.name() + "'");
  }
  if (meta->host_elements() != int64_t(state.params.size()))
    return err(*stepDir + ": checkpoint arrays do not match the plan's layout");
  for (auto [file, vec] : {std::pair<const char *, std::vector<float> *>{"params.f32", &state.params},
                           {"adam_m.f32", &state.m},
                           {"adam_v.f32", &state.v}}) {
    auto a = readCheckpointArray(*stepDir, file, meta->host_elements());
    if (!a) return a.takeError();
    // Copied into place: the arrays may be pinned (registered with CUDA).
    std::copy(a->begin(), a->end(), vec->begin());
  }
  state.step = meta->step();
  CheckpointInfo info;
  info.step = meta->step();
  info.totalSteps = meta->total_steps();
  info.seed = meta->seed();
  info.dataIndex = meta->data_index();
  info.microBatchesPerStep = meta->micro_batches_per_step();
  info.optimizer = meta->optimizer();
  info.weightsSource = meta->weights_source();
  for (const auto &n : meta->weight_names()) info.weightNames.push_back({n.param(), n.tensor()});
  return info;
}

} // namespace megac::runtime
