// megac_conformance: runs ONNX node tests (DIR/model.onnx with
// DIR/test_data_set_*/input_N.pb and output_N.pb) through megac's importer,
// the import pipeline and the CPU reference kernels, and compares every
// output with the ONNX backend-test tolerance.
//
//   megac_conformance [--expected-failures FILE] [--filter REGEX] [-j N] ROOT...
//
// A test is tried when all its ops have an IR schema and a CPU kernel;
// otherwise it is skipped. Each tried test runs in a child process, so a
// crash or a hang in one kernel fails that test only. The exit status is
// non-zero when a tried test fails without being listed in the expected
// failures file, or when a listed test passes.
#include "frontend/OnnxImport.h"
#include "frontend/TensorProto.h"
#include "ir/Eval.h"
#include "ir/OpSchema.h"
#include "ir/Printer.h"
#include "passes/Pass.h"
#include "runtime/cpu/Kernel.h"

#include "onnx.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace cl = llvm::cl;
using namespace megac;

static cl::list<std::string> Roots(cl::Positional, cl::desc("<test root dir>..."));
static cl::opt<std::string> ExpectedFailures("expected-failures", cl::desc("File of 'test_name  # reason' lines"),
                                             cl::value_desc("file"));
static cl::opt<std::string> Filter("filter", cl::desc("Run only tests whose name matches this regex"));
static cl::opt<unsigned> Jobs("j", cl::desc("Tests run in parallel (default: min(cores, 4))"), cl::init(0));
static cl::opt<unsigned> TimeoutSec("timeout", cl::desc("Seconds one test may run"), cl::init(120));
static cl::opt<bool> Verbose("v", cl::desc("Print every test's result"));
static cl::opt<bool> ListSupportedOps("list-supported-ops",
                                      cl::desc("Print the op types megac supports (schema and CPU kernel), then exit"));
static cl::opt<bool> PrintIR("print-ir", cl::desc("Print each tried test's specialized IR (to stderr; use with --filter)"));
static cl::opt<bool> PrintFailureList("print-failure-list",
                                      cl::desc("Also print the failures in expected_failures.txt format"));

namespace {

constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;

// ---------------------------------------------------------------------------
// Which tests to try.

bool opSupported(const std::string &op) {
  if (op == "Constant") return true; // the importer turns it into a constant value
  return ir::lookupOpSchema(op) != nullptr && cpu::lookupKernel(op) != nullptr;
}

std::vector<std::string> supportedOps() {
  std::vector<std::string> ops;
  for (const std::string &op : ir::registeredOpTypes())
    if (cpu::lookupKernel(op)) ops.push_back(op);
  ops.push_back("Constant");
  std::sort(ops.begin(), ops.end());
  return ops;
}

struct TestCase {
  std::string name;
  std::string dir;
};

struct ModelInfo {
  std::set<std::string> opTypes;       // "Add", or "domain.Op" outside the default domain
  std::vector<std::string> inputNames; // graph inputs that are not initializers, in order
  std::vector<DType> inputTypes;       // their declared element types
  std::string nonTensorIO;             // first graph input/output that is not a tensor
};

std::string nodeOpType(const onnx::NodeProto &n) {
  bool defaultDomain = n.domain().empty() || n.domain() == "ai.onnx";
  return defaultDomain ? n.op_type() : n.domain() + "." + n.op_type();
}

llvm::Expected<ModelInfo> readModelInfo(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return llvm::createStringError(buf.getError(), "cannot read " + path);
  onnx::ModelProto m;
  if (!m.ParseFromArray((*buf)->getBufferStart(), int((*buf)->getBufferSize())))
    return llvm::createStringError(llvm::inconvertibleErrorCode(), path + ": not a valid ONNX model");
  ModelInfo info;
  for (const auto &n : m.graph().node()) info.opTypes.insert(nodeOpType(n));
  std::set<std::string> inits;
  for (const auto &t : m.graph().initializer()) inits.insert(t.name());
  for (const auto &vi : m.graph().input()) {
    if (inits.count(vi.name())) continue;
    info.inputNames.push_back(vi.name());
    info.inputTypes.push_back(DType(vi.type().tensor_type().elem_type()));
    if (!vi.type().has_tensor_type() && info.nonTensorIO.empty()) info.nonTensorIO = "input '" + vi.name() + "'";
  }
  for (const auto &vi : m.graph().output())
    if (!vi.type().has_tensor_type() && info.nonTensorIO.empty()) info.nonTensorIO = "output '" + vi.name() + "'";
  return info;
}

std::vector<TestCase> findTests(const std::string &root) {
  std::vector<TestCase> tests;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(root, ec), end; it != end && !ec; it.increment(ec)) {
    std::string model = it->path() + "/model.onnx";
    if (llvm::sys::fs::exists(model)) tests.push_back({std::string(llvm::sys::path::filename(it->path())), it->path()});
  }
  if (ec) llvm::errs() << "conformance: cannot list " << root << ": " << ec.message() << "\n";
  return tests;
}

std::vector<std::string> dataSetDirs(const std::string &testDir) {
  std::vector<std::string> sets;
  for (int i = 0;; ++i) {
    std::string d = testDir + "/test_data_set_" + std::to_string(i);
    if (!llvm::sys::fs::is_directory(d)) break;
    sets.push_back(d);
  }
  return sets;
}

std::vector<std::string> numberedFiles(const std::string &dir, const char *prefix) {
  std::vector<std::string> files;
  for (int i = 0;; ++i) {
    std::string f = dir + "/" + prefix + std::to_string(i) + ".pb";
    if (!llvm::sys::fs::exists(f)) break;
    files.push_back(f);
  }
  return files;
}

// ---------------------------------------------------------------------------
// Comparing outputs.

std::string indexToString(const Shape &shape, int64_t flat) {
  if (shape.empty()) return "[]";
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? "," : "") + std::to_string(idx[d]);
  return s + "]";
}

std::string valueToString(const Tensor &t, int64_t i) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (isFloatType(t.dtype())) os << llvm::format("%.9g", t.getAsDouble(i));
  else if (t.dtype() == DType::U64) os << t.data<uint64_t>()[i];
  else os << t.getAsInt(i);
  return os.str();
}

bool floatClose(double got, double want, double rtol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  if (std::isnan(got)) return false;
  return std::fabs(got - want) <= kAtol + rtol * std::fabs(want);
}

// Empty when `got` matches `want`; else what differed.
std::string compareTensors(const Tensor &got, const Tensor &want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtypeName(got.dtype()) + ", expected " + dtypeName(want.dtype());
  if (got.shape() != want.shape())
    return "shape " + shapeToString(got.shape()) + ", expected " + shapeToString(want.shape());
  int64_t n = want.numel();
  if (n > 0 && (!got.raw() || !want.raw())) return "output has no data";
  bool isFloat = isFloatType(want.dtype());
  // As onnx's backend-test runner: two bfloat16 ulps for bfloat16 outputs.
  double rtol = want.dtype() == DType::BF16 ? std::max(kRtol, 1.0 / 64) : kRtol;
  size_t esize = dtypeSize(want.dtype());
  int64_t mismatches = 0, first = -1;
  double maxAbs = 0, maxRel = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool ok;
    if (isFloat) {
      double a = got.getAsDouble(i), e = want.getAsDouble(i);
      ok = floatClose(a, e, rtol);
      if (std::isfinite(a) && std::isfinite(e)) {
        double abs = std::fabs(a - e);
        maxAbs = std::max(maxAbs, abs);
        if (e != 0) maxRel = std::max(maxRel, abs / std::fabs(e));
      }
    } else if (want.dtype() == DType::Bool) {
      ok = (got.data<uint8_t>()[i] != 0) == (want.data<uint8_t>()[i] != 0);
    } else {
      ok = std::memcmp(static_cast<const char *>(got.raw()) + size_t(i) * esize,
                       static_cast<const char *>(want.raw()) + size_t(i) * esize, esize) == 0;
    }
    if (!ok) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return "";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << mismatches << " of " << n << " elements differ; first at " << indexToString(want.shape(), first)
     << ": got " << valueToString(got, first) << ", expected " << valueToString(want, first);
  if (isFloat) os << llvm::format("; max abs err %.3g, max rel err %.3g", maxAbs, maxRel);
  return os.str();
}

// ---------------------------------------------------------------------------
// Running one test (in a child process).

std::string errorText(llvm::Error e) {
  std::string s = llvm::toString(std::move(e));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// ONNX 1.12's test data stores bfloat16 tensors as uint16 (numpy has no
// bfloat16): reads such a tensor as the bfloat16 it holds.
Tensor asBf16IfStoredAsU16(const Tensor &t, DType wanted) {
  if (wanted != DType::BF16 || t.dtype() != DType::U16) return t;
  Tensor r(DType::BF16, t.shape());
  if (t.nbytes()) std::memcpy(r.raw(), t.raw(), t.nbytes());
  return r;
}

bool needsCompileTimeValue(const std::string &error) {
  return error.find("must be known at compile time") != std::string::npos;
}

struct RunOutputs {
  std::vector<Tensor> tensors;
  std::vector<std::string> names;
};

// Imports, specializes and runs the model once. Graph inputs named in
// `bound` become constants holding their feed, as if they were initializers.
std::string importAndRun(const TestCase &t, const std::map<std::string, Tensor> &feeds,
                         const std::set<std::string> &bound, RunOutputs &outs) {
  frontend::ImportOptions opts;
  for (const auto &[name, tensor] : feeds) opts.inputShapes[name] = tensor.shape();
  auto imported = frontend::importOnnx(t.dir + "/model.onnx", opts);
  if (!imported) return "import: " + errorText(imported.takeError());
  ir::Graph &g = **imported;
  std::vector<ir::ValueId> runtimeInputs;
  for (ir::ValueId id : g.inputs) {
    ir::Value &v = g.value(id);
    if (!bound.count(v.name)) {
      runtimeInputs.push_back(id);
      continue;
    }
    v.kind = ir::ValueKind::Const;
    v.data = feeds.at(v.name);
  }
  g.inputs = runtimeInputs;
  if (auto e = passes::runPipeline(g, passes::importPipeline(), passes::PassOptions()))
    return "pipeline: " + errorText(std::move(e));
  if (PrintIR) {
    ir::PrintOptions po;
    po.elideAbove = 16;
    llvm::errs() << "--- " << t.name << "\n";
    ir::printGraph(g, llvm::errs(), po);
  }
  auto r = ir::runGraph(g, feeds);
  if (!r) return "run: " + errorText(r.takeError());
  outs.tensors = std::move(*r);
  for (ir::ValueId o : g.outputs) outs.names.push_back(g.value(o).name);
  return "";
}

// Empty on success; else why the test failed. `boundNote` says which inputs
// had to be bound as constants.
std::string runDataSet(const TestCase &t, const ModelInfo &info, const std::string &setDir, std::string &boundNote) {
  std::vector<std::string> inputFiles = numberedFiles(setDir, "input_");
  std::vector<std::string> outputFiles = numberedFiles(setDir, "output_");
  if (inputFiles.size() > info.inputNames.size())
    return "the data set has " + std::to_string(inputFiles.size()) + " inputs, the model " +
           std::to_string(info.inputNames.size());
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputFiles.size(); ++i) {
    auto in = frontend::readTensorFile(inputFiles[i]);
    if (!in) return "cannot read input_" + std::to_string(i) + ".pb: " + errorText(in.takeError());
    feeds[info.inputNames[i]] = asBf16IfStoredAsU16(*in, info.inputTypes[i]);
  }
  // megac compiles for static shapes: values that decide shapes (Reshape's
  // shape, Slice's starts...) must be known at compile time. Node tests feed
  // them as inputs; if import asks for them, bind the test's values as
  // constants: first the integer and bool inputs, then all.
  std::set<std::string> nonFloat, all;
  for (const auto &[name, tensor] : feeds) {
    all.insert(name);
    if (!isFloatType(tensor.dtype())) nonFloat.insert(name);
  }
  RunOutputs outs;
  std::string err = importAndRun(t, feeds, {}, outs);
  for (const std::set<std::string> *bound : {&nonFloat, &all}) {
    if (err.empty() || !needsCompileTimeValue(err)) break;
    if (bound->empty() || (bound == &all && all.size() == nonFloat.size())) continue;
    outs = RunOutputs();
    err = importAndRun(t, feeds, *bound, outs);
    boundNote.clear();
    for (const std::string &n : *bound) boundNote += (boundNote.empty() ? "" : ", ") + n;
  }
  if (!err.empty()) return err;
  if (outs.tensors.size() != outputFiles.size())
    return "the graph has " + std::to_string(outs.tensors.size()) + " outputs, the data set " +
           std::to_string(outputFiles.size());
  for (size_t i = 0; i < outputFiles.size(); ++i) {
    auto want = frontend::readTensorFile(outputFiles[i]);
    if (!want) return "cannot read output_" + std::to_string(i) + ".pb: " + errorText(want.takeError());
    const Tensor &got = outs.tensors[i];
    std::string diff = compareTensors(got, asBf16IfStoredAsU16(*want, got.dtype()));
    if (!diff.empty()) return "output " + std::to_string(i) + " ('" + outs.names[i] + "'): " + diff;
  }
  return "";
}

std::string runTest(const TestCase &t, const ModelInfo &info, std::string &boundNote) {
  if (!info.nonTensorIO.empty()) return "graph " + info.nonTensorIO + " is not a tensor (sequence/optional/map)";
  std::vector<std::string> sets = dataSetDirs(t.dir);
  if (sets.empty()) return "no test_data_set_0";
  for (const std::string &s : sets) {
    std::string r = runDataSet(t, info, s, boundNote);
    if (!r.empty()) return sets.size() > 1 ? std::string(llvm::sys::path::filename(s)) + ": " + r : r;
  }
  return "";
}

struct Result {
  enum Kind { Pass, Fail, Skip };
  Result() = default;
  Result(Kind k, std::string d, std::string b = "") : kind(k), detail(std::move(d)), boundNote(std::move(b)) {}
  Kind kind = Skip;
  std::string detail;    // failure or skip reason
  std::string boundNote; // inputs bound as constants, if any
};

// Runs the test in a child; a crash or a timeout is a failure of this test only.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  size_t index = 0;
};

Child startChild(const TestCase &t, const ModelInfo &info, size_t index) {
  int fds[2];
  if (pipe(fds) != 0) {
    llvm::errs() << "conformance: pipe failed: " << std::strerror(errno) << "\n";
    std::exit(2);
  }
  llvm::outs().flush();
  llvm::errs().flush();
  pid_t pid = fork();
  if (pid < 0) {
    llvm::errs() << "conformance: fork failed: " << std::strerror(errno) << "\n";
    std::exit(2);
  }
  if (pid == 0) {
    close(fds[0]);
    alarm(TimeoutSec);
    std::string boundNote;
    std::string r = runTest(t, info, boundNote);
    // Keep the message well under the pipe's buffer, so the write never blocks.
    if (r.size() > 4000) r = r.substr(0, 4000) + "...";
    if (boundNote.size() > 1000) boundNote = boundNote.substr(0, 1000) + "...";
    // "P|F" + bound inputs + '\n' + failure.
    std::string msg = (r.empty() ? "P" : "F") + boundNote + "\n" + r;
    ssize_t ignored = write(fds[1], msg.data(), msg.size());
    (void)ignored;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  return {pid, fds[0], index};
}

Result finishChild(const Child &c, int status) {
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = read(c.fd, buf, sizeof buf)) > 0) msg.append(buf, size_t(n));
  close(c.fd);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGALRM) return {Result::Fail, "timed out after " + std::to_string(TimeoutSec) + "s"};
    return {Result::Fail, std::string("crashed (signal ") + std::to_string(sig) + ", " + strsignal(sig) + ")"};
  }
  if (msg.empty()) return {Result::Fail, "the test process exited without a result (status " + std::to_string(WEXITSTATUS(status)) + ")"};
  size_t nl = msg.find('\n');
  std::string bound = msg.substr(1, nl == std::string::npos ? std::string::npos : nl - 1);
  std::string detail = nl == std::string::npos ? "" : msg.substr(nl + 1);
  if (msg[0] == 'F' && !bound.empty()) detail += " [inputs bound as constants: " + bound + "]";
  return {msg[0] == 'P' ? Result::Pass : Result::Fail, detail, bound};
}

// ---------------------------------------------------------------------------
// Expected failures.

struct ExpectedFailure {
  std::string reason;
  bool seen = false;
};

bool readExpectedFailures(const std::string &path, std::map<std::string, ExpectedFailure> &out) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf) {
    llvm::errs() << "conformance: cannot read " << path << ": " << buf.getError().message() << "\n";
    return false;
  }
  llvm::SmallVector<llvm::StringRef, 0> lines;
  (*buf)->getBuffer().split(lines, '\n');
  for (llvm::StringRef line : lines) {
    auto [name, reason] = line.split('#');
    name = name.trim();
    if (name.empty()) continue;
    if (reason.trim().empty()) {
      llvm::errs() << "conformance: " << path << ": '" << name << "' has no '# reason'\n";
      return false;
    }
    out[name.str()] = {reason.trim().str(), false};
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "megac ONNX node-test conformance runner\n");
  auto &os = llvm::outs();
  if (ListSupportedOps) {
    for (const std::string &op : supportedOps()) os << op << "\n";
    return 0;
  }
  if (Roots.empty()) {
    llvm::errs() << "conformance: give at least one test root directory\n";
    return 2;
  }
  std::map<std::string, ExpectedFailure> expected;
  if (!ExpectedFailures.empty() && !readExpectedFailures(ExpectedFailures, expected)) return 2;
  std::optional<llvm::Regex> filter;
  if (!Filter.empty()) {
    filter.emplace(Filter);
    std::string err;
    if (!filter->isValid(err)) {
      llvm::errs() << "conformance: bad --filter regex: " << err << "\n";
      return 2;
    }
  }

  std::vector<TestCase> tests;
  for (const std::string &root : Roots) {
    if (!llvm::sys::fs::is_directory(root)) {
      llvm::errs() << "conformance: test root " << root << " is not a directory\n";
      return 2;
    }
    for (TestCase &t : findTests(root))
      if (!filter || filter->match(t.name)) tests.push_back(std::move(t));
  }
  std::sort(tests.begin(), tests.end(), [](const TestCase &a, const TestCase &b) { return a.name < b.name; });
  for (size_t i = 1; i < tests.size(); ++i)
    if (tests[i].name == tests[i - 1].name) {
      llvm::errs() << "conformance: test name " << tests[i].name << " appears twice (" << tests[i - 1].dir << ", "
                   << tests[i].dir << ")\n";
      return 2;
    }

  // Decide what to try; schemas and kernels are looked up here, once, before forking.
  std::vector<ModelInfo> infos(tests.size());
  std::vector<Result> results(tests.size());
  std::vector<size_t> toRun;
  for (size_t i = 0; i < tests.size(); ++i) {
    auto info = readModelInfo(tests[i].dir + "/model.onnx");
    if (!info) {
      results[i] = {Result::Fail, errorText(info.takeError())};
      continue;
    }
    infos[i] = std::move(*info);
    auto unsupported = std::find_if(infos[i].opTypes.begin(), infos[i].opTypes.end(),
                                    [](const std::string &op) { return !opSupported(op); });
    if (unsupported != infos[i].opTypes.end()) results[i] = {Result::Skip, "unsupported op " + *unsupported};
    else toRun.push_back(i);
  }

  // Kernels inside each child run single-threaded; the tests run in parallel instead.
  setenv("MEGAC_THREADS", "1", 1);
  unsigned jobs = Jobs ? Jobs : std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
  std::map<pid_t, Child> running;
  size_t next = 0;
  while (next < toRun.size() || !running.empty()) {
    while (next < toRun.size() && running.size() < jobs) {
      size_t i = toRun[next++];
      Child c = startChild(tests[i], infos[i], i);
      running[c.pid] = c;
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      llvm::errs() << "conformance: waitpid failed: " << std::strerror(errno) << "\n";
      return 2;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    results[it->second.index] = finishChild(it->second, status);
    running.erase(it);
  }

  // Report.
  int64_t passed = 0, failed = 0, skipped = 0, xfailed = 0, xpassed = 0, passedBound = 0;
  std::map<std::string, std::vector<std::string>> skipsByReason;
  std::map<std::string, int64_t> passedPerOp;
  std::vector<std::string> failureList;
  for (size_t i = 0; i < tests.size(); ++i) {
    const TestCase &t = tests[i];
    const Result &r = results[i];
    auto ex = expected.find(t.name);
    bool listed = ex != expected.end();
    if (listed) ex->second.seen = r.kind != Result::Skip;
    switch (r.kind) {
    case Result::Skip:
      ++skipped;
      skipsByReason[r.detail].push_back(t.name);
      break;
    case Result::Pass:
      ++passed;
      passedBound += !r.boundNote.empty();
      for (const std::string &op : infos[i].opTypes)
        if (op != "Constant") ++passedPerOp[op];
      if (listed) {
        ++xpassed;
        os << "XPASS " << t.name << ": listed as an expected failure (" << ex->second.reason
           << ") but passes now; remove it from the list\n";
      } else if (Verbose) {
        os << "PASS  " << t.name;
        if (!r.boundNote.empty()) os << " [inputs bound as constants: " << r.boundNote << "]";
        os << "\n";
      }
      break;
    case Result::Fail:
      failureList.push_back(t.name + "  # " + r.detail);
      if (listed) {
        ++xfailed;
        os << "XFAIL " << t.name << ": " << ex->second.reason;
        if (Verbose) os << " [" << r.detail << "]";
        os << "\n";
      } else {
        ++failed;
        os << "FAIL  " << t.name << ": " << r.detail << "\n";
      }
      break;
    }
  }
  for (const auto &[reason, names] : skipsByReason) {
    os << "skipped (" << reason << "):";
    for (const std::string &n : names) os << " " << n;
    os << "\n";
  }
  for (const auto &[name, ex] : expected)
    if (!ex.seen && (!filter || filter->match(name)))
      os << "note: expected failure " << name << " was not tried (not found or skipped)\n";
  os << "passed per op:";
  for (const auto &[op, n] : passedPerOp) os << " " << op << "=" << n;
  os << "\n";
  if (PrintFailureList) {
    os << "--- failures in expected_failures.txt format ---\n";
    for (const std::string &l : failureList) os << l << "\n";
  }
  if (passedBound)
    os << passedBound << " of the passed tests ran with shape-deciding inputs bound as constants (-v lists them)\n";
  if (xpassed) os << "unexpected passes: " << xpassed << "\n";
  os << "conformance: " << passed << " passed, " << failed << " failed, " << skipped << " skipped (unsupported ops), "
     << xfailed << " expected failures\n";
  return failed || xpassed ? 1 : 0;
}
