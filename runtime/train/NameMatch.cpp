#include "runtime/train/NameMatch.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace megac::runtime {

namespace {

constexpr size_t kListed = 20;

struct Prefix {
  std::string text;
  bool onGraph = true;
  int32_t count = 0;
};

// The prefix (removed from one side's names) under which the most names of
// `graph` and `source` line up; the empty prefix is exact matching.
Prefix bestPrefix(const std::vector<const std::string *> &graph, const std::vector<const std::string *> &source) {
  llvm::StringMap<char> g, s;
  for (const std::string *n : graph) g[*n];
  for (const std::string *n : source) s[*n];
  Prefix best;
  for (const std::string *n : graph) best.count += s.count(*n);
  std::map<std::pair<std::string, bool>, int32_t> counts;
  auto tally = [&](const std::vector<const std::string *> &names, const llvm::StringMap<char> &other, bool onGraph) {
    for (const std::string *n : names)
      for (size_t i = 0; i + 1 < n->size(); ++i)
        if ((*n)[i] == '.' && other.count(llvm::StringRef(*n).substr(i + 1))) ++counts[{n->substr(0, i + 1), onGraph}];
  };
  tally(graph, s, true);
  tally(source, g, false);
  for (const auto &[key, count] : counts)
    if (count > best.count || (count == best.count && !best.text.empty() && key.first.size() < best.text.size()))
      best = Prefix{key.first, key.second, count};
  return best;
}

std::string shapeStr(const Shape &s) { return shapeToString(s); }

bool transposed(const Shape &a, const Shape &b) {
  return a.size() == 2 && b.size() == 2 && a[0] == b[1] && a[1] == b[0] && a[0] != a[1];
}

} // namespace

llvm::Expected<NameMatch> matchWeightNames(const std::vector<WantedTensor> &wanted,
                                           const std::vector<OfferedTensor> &offered, const NameMatchOptions &opts) {
  NameMatch m;
  m.source.assign(wanted.size(), -1);
  std::vector<const std::string *> gNames, sNames;
  for (const WantedTensor &w : wanted) gNames.push_back(&w.name);
  for (const OfferedTensor &o : offered) sNames.push_back(&o.name);
  const Prefix prefix = bestPrefix(gNames, sNames);
  m.prefix = prefix.text;
  m.prefixOnGraph = prefix.onGraph;

  llvm::StringMap<int32_t> byName;
  for (size_t i = 0; i < offered.size(); ++i) byName[offered[i].name] = int32_t(i);
  std::vector<bool> used(offered.size(), false);
  auto lookup = [&](const std::string &n) -> int32_t {
    auto it = byName.find(n);
    return it == byName.end() || used[size_t(it->second)] ? -1 : it->second;
  };
  for (size_t i = 0; i < wanted.size(); ++i) {
    const std::string &n = wanted[i].name;
    int32_t j = -1;
    if (!prefix.text.empty()) {
      if (!prefix.onGraph) j = lookup(prefix.text + n);
      else if (llvm::StringRef(n).startswith(prefix.text)) j = lookup(n.substr(prefix.text.size()));
    }
    if (j < 0) j = lookup(n);
    if (j >= 0) {
      m.source[i] = j;
      used[size_t(j)] = true;
    }
  }
  // A tied embedding and head without a name match: the one unused tensor of its shape.
  std::vector<std::string> tieHints;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (m.source[i] >= 0 || !wanted[i].tiedEmbeddingHead) continue;
    std::vector<int32_t> same;
    for (size_t j = 0; j < offered.size(); ++j)
      if (!used[j] && offered[j].shape == wanted[i].shape) same.push_back(int32_t(j));
    if (same.size() == 1) {
      m.source[i] = same[0];
      used[size_t(same[0])] = true;
      m.notes.push_back("'" + wanted[i].name + "' is the graph's tied embedding and head; it takes '" +
                        offered[size_t(same[0])].name + "'");
    } else if (same.size() > 1) {
      std::string h = "hint: '" + wanted[i].name + "' is the graph's tied embedding and head, and " +
                      std::to_string(same.size()) + " unmatched tensors have its shape:";
      for (size_t k = 0; k < same.size() && k < 4; ++k) h += " '" + offered[size_t(same[k])].name + "'";
      tieHints.push_back(h);
    }
  }

  std::vector<std::string> shapeErrors;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (m.source[i] < 0) continue;
    const OfferedTensor &o = offered[size_t(m.source[i])];
    if (o.shape == wanted[i].shape) {
      ++m.matched;
      continue;
    }
    shapeErrors.push_back("'" + wanted[i].name + "' is " + shapeStr(wanted[i].shape) + " in " + opts.graphLabel +
                          ", '" + o.name + "' is " + shapeStr(o.shape) + " in " + opts.sourceLabel +
                          (transposed(o.shape, wanted[i].shape) ? " (transposed)" : ""));
  }
  std::vector<int32_t> unmatchedG, unmatchedS;
  for (size_t i = 0; i < wanted.size(); ++i)
    if (m.source[i] < 0) unmatchedG.push_back(int32_t(i));
  for (size_t j = 0; j < offered.size(); ++j)
    if (!used[j]) unmatchedS.push_back(int32_t(j));

  std::string prefixNote;
  if (!prefix.text.empty())
    prefixNote = "names compared after removing the prefix '" + prefix.text + "' from " +
                 (prefix.onGraph ? opts.graphLabel : opts.sourceLabel) + "'s names";
  const bool fail = !shapeErrors.empty() || m.matched == 0 || (!unmatchedG.empty() && !opts.allowMissing);
  if (!fail) {
    if (!prefixNote.empty()) m.notes.insert(m.notes.begin(), prefixNote);
    m.missing = unmatchedG;
    if (!unmatchedS.empty()) {
      std::string n = std::to_string(unmatchedS.size()) + " tensor" + (unmatchedS.size() == 1 ? "" : "s") + " of " +
                      opts.sourceLabel + " match no parameter and are not used:";
      for (size_t k = 0; k < unmatchedS.size() && k < kListed; ++k) n += " '" + offered[size_t(unmatchedS[k])].name + "'";
      if (unmatchedS.size() > kListed) n += " ...";
      m.notes.push_back(n);
      for (size_t i = 0; i < wanted.size(); ++i)
        for (int32_t j : unmatchedS)
          if (wanted[i].tiedEmbeddingHead && offered[size_t(j)].shape == wanted[i].shape)
            m.notes.push_back("warning: the graph ties its embedding and head ('" + wanted[i].name + "'), but " +
                              opts.sourceLabel + " also holds '" + offered[size_t(j)].name +
                              "' of that shape, which is not used: if the model's head is its own weight, export "
                              "it untied");
    }
    return m;
  }

  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << opts.sourceLabel << ": ";
  if (!shapeErrors.empty()) {
    os << shapeErrors.size() << " tensor" << (shapeErrors.size() == 1 ? "" : "s") << " of the weights "
       << (shapeErrors.size() == 1 ? "has" : "have") << " another shape than the parameter of that name:";
    for (size_t k = 0; k < shapeErrors.size() && k < kListed; ++k) os << "\n  " << shapeErrors[k];
    if (!unmatchedG.empty() || m.matched == 0) os << "\nand ";
  }
  if (m.matched == 0 && shapeErrors.empty())
    os << "none of its " << offered.size() << " tensors matches one of the " << wanted.size() << " parameters of "
       << opts.graphLabel;
  else if (!unmatchedG.empty())
    os << unmatchedG.size() << " of the " << wanted.size() << " parameters of " << opts.graphLabel
       << " have no tensor in the weights";
  if (!prefixNote.empty()) os << " (" << prefixNote << ")";
  if (!unmatchedG.empty()) {
    os << "\n  parameters without a tensor (" << unmatchedG.size() << "):";
    for (size_t k = 0; k < unmatchedG.size() && k < kListed; ++k)
      os << "\n    " << wanted[size_t(unmatchedG[k])].name << " " << shapeStr(wanted[size_t(unmatchedG[k])].shape);
    if (unmatchedG.size() > kListed) os << "\n    ...";
    os << "\n  tensors of the weights without a parameter (" << unmatchedS.size() << "):";
    for (size_t k = 0; k < unmatchedS.size() && k < kListed; ++k) {
      const OfferedTensor &o = offered[size_t(unmatchedS[k])];
      os << "\n    " << o.name << " " << shapeStr(o.shape) << (o.dtype.empty() ? "" : " " + o.dtype);
    }
    if (unmatchedS.size() > kListed) os << "\n    ...";
  }

  // Hints: names the exporter generated, a transpose, another prefix, a tie.
  static const llvm::Regex generated("^val_[0-9]+$");
  std::string generatedExample;
  for (int32_t i : unmatchedG)
    if (generated.match(wanted[size_t(i)].name)) generatedExample = wanted[size_t(i)].name;
  if (!generatedExample.empty())
    os << "\n  hint: " << opts.graphLabel << " names parameters as the exporter generated them (e.g. '"
       << generatedExample
       << "'): torch.onnx.export(dynamo=True) optimizes by default, which renames weights (val_N) and stores "
          "Linear weights transposed, so they cannot be matched to a checkpoint by name. Export with "
          "tools/export_shapes_only.py, or torch.onnx.export(..., optimize=False): see \"Fine-tune your model\" in "
          "the README";
  int32_t nT = 0;
  std::string tExample;
  for (int32_t i : unmatchedG)
    for (int32_t j : unmatchedS)
      if (transposed(wanted[size_t(i)].shape, offered[size_t(j)].shape)) {
        if (!nT++) tExample = "'" + wanted[size_t(i)].name + "' " + shapeStr(wanted[size_t(i)].shape) + " and '" +
                              offered[size_t(j)].name + "' " + shapeStr(offered[size_t(j)].shape);
        break;
      }
  if (nT)
    os << "\n  hint: " << nT << " of the parameters without a tensor have the transposed shape of an unmatched "
       << "tensor (e.g. " << tExample
       << "): the exporter stored Linear weights as [in, out]; export with optimize=False "
          "(tools/export_shapes_only.py) to keep Hugging Face's [out, in]";
  if (!unmatchedG.empty()) {
    std::vector<const std::string *> ug, us;
    for (int32_t i : unmatchedG) ug.push_back(&wanted[size_t(i)].name);
    for (int32_t j : unmatchedS) us.push_back(&offered[size_t(j)].name);
    Prefix p = bestPrefix(ug, us);
    if (!p.text.empty() && p.count > 0)
      os << "\n  hint: with the prefix '" << p.text << "' removed from "
         << (p.onGraph ? opts.graphLabel : opts.sourceLabel) << "'s names, " << p.count
         << " of them would line up";
  }
  for (const std::string &h : tieHints) os << "\n  " << h;
  if (!unmatchedG.empty() && m.matched > 0 && shapeErrors.empty())
    os << "\n  pass --init-missing to initialize the parameters without a tensor randomly instead";
  os.flush();
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

} // namespace megac::runtime
