#include "tools/inspect/PlanTimeline.h"

#include "runtime/plan/StreamLayout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

namespace {

// Page geometry, in SVG pixels.
constexpr double kWidth = 1360, kLeft = 110, kRight = 30;
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr double kLaneTop = 12, kLaneHeight = 34, kLaneGap = 10;
constexpr double kMemTop = 16, kMemHeight = 200;

std::string escape(llvm::StringRef s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    case '\'': out += "&#39;"; break;
    default: out += c;
    }
  }
  return out;
}

std::string fmt(const char *f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// A unit for the step's times: seconds, milliseconds or microseconds.
struct TimeUnit {
  double scale;
  const char *name;
};
TimeUnit timeUnit(double seconds) {
  if (seconds >= 1) return {1, "s"};
  if (seconds >= 1e-3) return {1e3, "ms"};
  return {1e6, "us"};
}

struct ByteUnit {
  double scale;
  const char *name;
};
ByteUnit byteUnit(double bytes) {
  if (bytes >= double(int64_t(1) << 30)) return {1.0 / double(int64_t(1) << 30), "GiB"};
  if (bytes >= double(1 << 20)) return {1.0 / double(1 << 20), "MiB"};
  return {1.0 / 1024, "KiB"};
}

// Tick spacing of about range/8: 1, 2 or 5 times a power of ten.
double niceStep(double range) {
  if (!(range > 0)) return 1;
  double raw = range / 8, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

const char *kindClass(int kind) {
  switch (kind) {
  case StreamAction::PREFETCH: return "prefetch";
  case StreamAction::FORWARD: return "forward";
  case StreamAction::BACKWARD: return "backward";
  case StreamAction::OFFLOAD: return "offload";
  case StreamAction::UPDATE:
  case StreamAction::UPDATE_UNREAD_ROWS: return "update";
  case StreamAction::FETCH_MOMENTS: return "moments";
  case StreamAction::WRITEBACK: return "writeback";
  case StreamAction::SAVE_CHECKPOINT: return "ckpt-out";
  case StreamAction::LOAD_CHECKPOINT: return "ckpt-in";
  default: return "other";
  }
}

std::string withCommas(int64_t n) {
  std::string s = std::to_string(n), out;
  int digits = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (*it != '-' && digits && digits % 3 == 0) out += ',';
    out += *it;
    if (*it != '-') ++digits;
  }
  return std::string(out.rbegin(), out.rend());
}

class Timeline {
public:
  // `pr`: the cost model's prediction, or a measured step (measuredStep);
  // `label` says which.
  Timeline(const Plan &p, const PlanReport &r, const StepPrediction &pr, const std::string &label,
           const std::string &path, llvm::raw_ostream &os)
      : p_(p), s_(r.schedule), pr_(pr), label_(label), path_(path), os_(os), span_(spanOf(pr)),
        tu_(timeUnit(span_)) {}

  void write() {
    header();
    lanes();
    memoryChart();
    footer();
  }

private:
  // The time drawn: the step, and past its end the host AdamW that runs on
  // beside the next step where steps overlap.
  static double spanOf(const StepPrediction &pr) {
    double span = pr.stepSeconds;
    for (const ActionTiming &a : pr.actions) span = std::max(span, a.end);
    return span;
  }
  double x(double seconds) const { return kLeft + (span_ > 0 ? seconds / span_ : 0) * kPlotWidth; }
  std::string t(double seconds) const { return fmt("%.3f ", seconds * tu_.scale) + tu_.name; }

  void header();
  void lanes();
  void timeAxis(double y);
  void memoryChart();
  void footer();

  const Plan &p_;
  const ScheduleReport &s_;
  const StepPrediction &pr_;
  const std::string &label_;
  const std::string &path_;
  llvm::raw_ostream &os_;
  double span_;
  TimeUnit tu_;
};

void Timeline::header() {
  os_ << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<title>megac timeline: " << escape(path_) << "</title>\n"
      << "<style>\n"
         "body { font-family: sans-serif; margin: 16px; color: #222; background: #fff; }\n"
         "h1 { font-size: 20px; margin: 0 0 6px 0; }\n"
         "h2 { font-size: 15px; margin: 18px 0 4px 0; }\n"
         "p.note { margin: 2px 0; font-size: 13px; }\n"
         "table.lanes { border-collapse: collapse; font-size: 13px; margin-top: 6px; }\n"
         "table.lanes td, table.lanes th { padding: 2px 10px; text-align: right; border-bottom: 1px solid #ddd; }\n"
         "table.lanes td:first-child, table.lanes th:first-child { text-align: left; }\n"
         "svg { display: block; }\n"
         "svg text { font-size: 11px; fill: #333; }\n"
         "text.label { fill: #fff; pointer-events: none; }\n"
         "text.lane-name { font-size: 13px; font-weight: bold; }\n"
         "rect.lane-bg { fill: #f4f4f4; }\n"
         "rect.bar { stroke: #fff; stroke-width: 0.5; }\n"
         "rect.bar:hover { stroke: #000; stroke-width: 1.5; }\n"
         ".prefetch { fill: #4e79a7; background: #4e79a7; } .forward { fill: #59a14f; background: #59a14f; }\n"
         ".backward { fill: #e15759; background: #e15759; } .offload { fill: #f28e2b; background: #f28e2b; }\n"
         ".update { fill: #b07aa1; background: #b07aa1; } .other { fill: #999; background: #999; }\n"
         ".moments { fill: #76b7b2; background: #76b7b2; } .writeback { fill: #9c755f; background: #9c755f; }\n"
         ".ckpt-out { fill: #edc948; background: #edc948; } .ckpt-in { fill: #ff9da7; background: #ff9da7; }\n"
         "line.grid { stroke: #ddd; } line.axis { stroke: #666; }\n"
         "path.memory { fill: #c6dbef; stroke: #2171b5; stroke-width: 1.5; }\n"
         "line.allocation { stroke: #d62728; stroke-dasharray: 6 4; }\n"
         ".legend span { display: inline-block; margin-right: 14px; font-size: 13px; }\n"
         ".legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }\n"
         "</style>\n</head>\n<body>\n";
  os_ << "<h1>megac timeline</h1>\n";
  os_ << "<p class=\"note\">" << escape(path_) << ": " << escape(p_.model_path()) << ", batch " << p_.batch() << " x seq "
      << p_.seq() << ", compute " << escape(p_.compute()) << ", " << p_.units_size() << " units, "
      << withCommas(p_.total_parameters()) << " parameters, " << s_.weightSlots << " weight slots</p>\n";
  os_ << "<p class=\"note\" id=\"label\"><b>" << escape(label_) << "</b></p>\n";
  const bool passes = s_.microBatchesPerPass > 1;
  os_ << "<p class=\"note\" id=\"summary\">step " << t(pr_.stepSeconds)
      << (passes ? " per pass of " + std::to_string(s_.microBatchesPerPass) + " micro-batches" : std::string(" per micro-batch"))
      << "; bottleneck " << laneName(pr_.bottleneck) << "; " << fmt("%.2f", pr_.tflops)
      << (passes ? " TFLOPS (6 x parameters x batch x seq x micro-batches / step time)" : " TFLOPS (6 x parameters x batch x seq / step time)")
      << "; device memory peak "
      << fmt("%.3f", double(pr_.peakMemoryBytes) / double(int64_t(1) << 30)) << " GiB in use of a "
      << fmt("%.3f", double(s_.deviceBytes) / double(int64_t(1) << 30)) << " GiB allocation</p>\n";
  if (span_ > pr_.stepSeconds * (1 + 1e-9))
    os_ << "<p class=\"note\" id=\"overlap\">the steps overlap: the step ends with its GPU lanes at the dashed line; "
           "its host AdamW runs on beside the next step's forward</p>\n";
  os_ << "<table class=\"lanes\"><tr><th>lane</th><th>busy</th><th>% of step</th><th>critical path</th></tr>\n";
  for (int lane = 0; lane < kNumLanes; ++lane)
    os_ << "<tr><td>" << laneName(lane) << "</td><td>" << t(pr_.laneBusy[lane]) << "</td><td>"
        << fmt("%.1f", pr_.stepSeconds > 0 ? 100 * pr_.laneBusy[lane] / pr_.stepSeconds : 0) << "</td><td>"
        << t(pr_.criticalPath[lane]) << "</td></tr>\n";
  os_ << "</table>\n";
}

void Timeline::timeAxis(double y) {
  double step = niceStep(span_);
  os_ << "<g class=\"axis\">\n";
  os_ << "<line class=\"axis\" x1=\"" << fmt("%.2f", kLeft) << "\" x2=\"" << fmt("%.2f", kLeft + kPlotWidth)
      << "\" y1=\"" << fmt("%.2f", y) << "\" y2=\"" << fmt("%.2f", y) << "\"/>\n";
  for (int i = 0; i * step <= span_ * (1 + 1e-9); ++i) {
    double xi = x(i * step);
    os_ << "<line class=\"axis\" x1=\"" << fmt("%.2f", xi) << "\" x2=\"" << fmt("%.2f", xi) << "\" y1=\""
        << fmt("%.2f", y) << "\" y2=\"" << fmt("%.2f", y + 5) << "\"/>"
        << "<text x=\"" << fmt("%.2f", xi) << "\" y=\"" << fmt("%.2f", y + 17) << "\" text-anchor=\"middle\">"
        << fmt("%g", double(float(i * step * tu_.scale))) << "</text>\n";
  }
  os_ << "<text x=\"" << fmt("%.2f", kLeft + kPlotWidth) << "\" y=\"" << fmt("%.2f", y + 30)
      << "\" text-anchor=\"end\">time (" << tu_.name << ")</text>\n";
  os_ << "</g>\n";
}

void Timeline::lanes() {
  os_ << "<h2>streams (one bar per action)</h2>\n<div class=\"legend\">";
  for (int kind : {StreamAction::PREFETCH, StreamAction::FORWARD, StreamAction::BACKWARD, StreamAction::OFFLOAD,
                   StreamAction::UPDATE, StreamAction::FETCH_MOMENTS, StreamAction::WRITEBACK, StreamAction::SAVE_CHECKPOINT,
                   StreamAction::LOAD_CHECKPOINT}) {
    bool used = kind <= StreamAction::UPDATE; // the moment and checkpoint copies only where a schedule has them
    for (const StreamAction &a : p_.schedule().actions()) used |= a.kind() == kind;
    if (used) os_ << "<span><i class=\"" << kindClass(kind) << "\"></i>" << kindClass(kind) << "</span>";
  }
  os_ << "</div>\n";
  const double axisY = kLaneTop + kNumLanes * (kLaneHeight + kLaneGap);
  os_ << "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
      << axisY + 40 << "\" viewBox=\"0 0 " << kWidth << " " << axisY + 40 << "\">\n";
  const StreamSchedule &sch = p_.schedule();
  for (int lane = 0; lane < kNumLanes; ++lane) {
    double y = kLaneTop + lane * (kLaneHeight + kLaneGap);
    os_ << "<g class=\"lane\" data-lane=\"" << laneName(lane) << "\">\n";
    os_ << "<rect class=\"lane-bg\" x=\"" << fmt("%.2f", kLeft) << "\" y=\"" << fmt("%.2f", y) << "\" width=\""
        << fmt("%.2f", kPlotWidth) << "\" height=\"" << kLaneHeight << "\"/>\n";
    os_ << "<text class=\"lane-name\" x=\"" << kLeft - 10 << "\" y=\"" << fmt("%.2f", y + kLaneHeight / 2 + 4)
        << "\" text-anchor=\"end\">" << laneName(lane) << "</text>\n";
    for (int i = 0; i < sch.actions_size(); ++i) {
      const ActionTiming &a = pr_.actions[size_t(i)];
      if (a.lane != lane) continue;
      const StreamAction &sa = sch.actions(i);
      const std::string unit = escape(p_.units(sa.unit()).name());
      double x0 = x(a.start), w = std::max(0.6, x(a.end) - x0);
      os_ << "<rect class=\"bar " << kindClass(sa.kind()) << "\" data-action=\"" << i << "\" data-lane=\""
          << laneName(lane) << "\" data-kind=\"" << kindClass(sa.kind()) << "\" data-unit=\"" << unit << "\" x=\""
          << fmt("%.2f", x0) << "\" y=\"" << fmt("%.2f", y + 2) << "\" width=\"" << fmt("%.2f", w) << "\" height=\""
          << kLaneHeight - 4 << "\">";
      os_ << "<title>" << actionKindName(sa.kind()) << " " << unit << " (action " << i << ")\n"
          << t(a.start) << " to " << t(a.end) << " (" << t(a.end - a.start) << "; alone " << t(a.alone) << ")";
      if (a.transferBytes) os_ << "\n" << withCommas(a.transferBytes) << " bytes";
      if (a.gemmFlops > 0) os_ << "\n" << fmt("%.4g", a.gemmFlops) << " GEMM flops";
      if (a.attentionFlops > 0) os_ << "\n" << fmt("%.4g", a.attentionFlops) << " attention flops";
      if (a.memoryBytes > 0) os_ << "\n" << fmt("%.4g", a.memoryBytes) << " bytes through memory-bound ops";
      if (a.parameters) os_ << "\n" << withCommas(a.parameters) << " parameters updated";
      os_ << "</title></rect>\n";
      // The unit's name where it fits (about 6.5 px per character).
      if (w > 6.5 * double(p_.units(sa.unit()).name().size()) + 6)
        os_ << "<text class=\"label\" x=\"" << fmt("%.2f", x0 + w / 2) << "\" y=\""
            << fmt("%.2f", y + kLaneHeight / 2 + 4) << "\" text-anchor=\"middle\">" << unit << "</text>\n";
    }
    os_ << "</g>\n";
  }
  if (span_ > pr_.stepSeconds * (1 + 1e-9)) // where the step ends and the next one starts
    os_ << "<line class=\"allocation\" id=\"step-end\" x1=\"" << fmt("%.2f", x(pr_.stepSeconds)) << "\" x2=\""
        << fmt("%.2f", x(pr_.stepSeconds)) << "\" y1=\"" << fmt("%.2f", kLaneTop - 4) << "\" y2=\"" << fmt("%.2f", axisY)
        << "\"><title>the step ends: " << t(pr_.stepSeconds) << "</title></line>\n";
  timeAxis(axisY);
  os_ << "</svg>\n";
}

void Timeline::memoryChart() {
  const double top = std::max<double>(double(s_.deviceBytes), double(pr_.peakMemoryBytes)) * 1.08;
  const ByteUnit bu = byteUnit(top);
  auto y = [&](double bytes) { return kMemTop + kMemHeight - (top > 0 ? bytes / top : 0) * kMemHeight; };
  const double base = kMemTop + kMemHeight;
  os_ << "<h2>device memory in use (regions live from their first action's start to their last action's end)</h2>\n";
  os_ << "<svg id=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << base + 40
      << "\" viewBox=\"0 0 " << kWidth << " " << base + 40 << "\">\n";
  double step = niceStep(top * bu.scale);
  for (int i = 0; i * step <= top * bu.scale * (1 + 1e-9); ++i) {
    double yi = y(i * step / bu.scale);
    os_ << "<line class=\"grid\" x1=\"" << fmt("%.2f", kLeft) << "\" x2=\"" << fmt("%.2f", kLeft + kPlotWidth)
        << "\" y1=\"" << fmt("%.2f", yi) << "\" y2=\"" << fmt("%.2f", yi) << "\"/><text x=\"" << kLeft - 8
        << "\" y=\"" << fmt("%.2f", yi + 4) << "\" text-anchor=\"end\">" << fmt("%g", double(float(i * step)))
        << "</text>\n";
  }
  os_ << "<text x=\"14\" y=\"" << fmt("%.2f", kMemTop + kMemHeight / 2) << "\" transform=\"rotate(-90 14 "
      << fmt("%.2f", kMemTop + kMemHeight / 2) << ")\" text-anchor=\"middle\">" << bu.name << "</text>\n";
  // The step function, closed along the baseline.
  std::string d = "M" + fmt("%.2f", kLeft) + "," + fmt("%.2f", base);
  for (size_t i = 0; i < pr_.memory.size(); ++i) {
    const MemoryPoint &m = pr_.memory[i];
    d += " L" + fmt("%.2f", x(m.time)) + "," + fmt("%.2f", y(double(m.bytes)));
    double next = i + 1 < pr_.memory.size() ? pr_.memory[i + 1].time : pr_.stepSeconds;
    d += " L" + fmt("%.2f", x(next)) + "," + fmt("%.2f", y(double(m.bytes)));
  }
  d += " L" + fmt("%.2f", x(pr_.stepSeconds)) + "," + fmt("%.2f", base) + " Z";
  os_ << "<path class=\"memory\" d=\"" << d << "\"><title>device memory in use: peak "
      << withCommas(pr_.peakMemoryBytes) << " bytes</title></path>\n";
  os_ << "<line class=\"allocation\" x1=\"" << fmt("%.2f", kLeft) << "\" x2=\"" << fmt("%.2f", kLeft + kPlotWidth)
      << "\" y1=\"" << fmt("%.2f", y(double(s_.deviceBytes))) << "\" y2=\"" << fmt("%.2f", y(double(s_.deviceBytes)))
      << "\"><title>the plan's device allocation: " << withCommas(s_.deviceBytes) << " bytes</title></line>\n";
  os_ << "<text x=\"" << fmt("%.2f", kLeft + kPlotWidth) << "\" y=\"" << fmt("%.2f", y(double(s_.deviceBytes)) - 4)
      << "\" text-anchor=\"end\">allocation " << fmt("%.3f", double(s_.deviceBytes) * bu.scale) << " " << bu.name
      << " (budget " << fmt("%.1f", double(s_.gpuBudgetBytes) / double(int64_t(1) << 30)) << " GiB)</text>\n";
  timeAxis(base);
  os_ << "</svg>\n";
}

void Timeline::footer() {
  // Run by a browser while the page loads: how many bars render with a
  // positive size inside the timeline (read by the headless-Chromium test).
  os_ << "<script>\n"
         "(function () {\n"
         "  var svg = document.getElementById('timeline').getBoundingClientRect();\n"
         "  var bars = document.querySelectorAll('rect.bar'), n = 0;\n"
         "  for (var i = 0; i < bars.length; ++i) {\n"
         "    var r = bars[i].getBoundingClientRect();\n"
         "    if (r.width > 0 && r.height > 0 && r.left >= svg.left - 1 && r.right <= svg.right + 1) ++n;\n"
         "  }\n"
         "  document.body.setAttribute('data-rendered-bars', String(n));\n"
         "  document.body.setAttribute('data-lanes', String(document.querySelectorAll('g.lane').length));\n"
         "})();\n"
         "</script>\n</body>\n</html>\n";
}

} // namespace

llvm::Error writePlanTimeline(const Plan &p, const PlanReport &r, const std::string &planPath, llvm::raw_ostream &os) {
  if (!r.hasSchedule) return err("the plan has no streaming schedule (compiled for the CPU only): no timeline to draw");
  if (!r.schedule.predicted) return err("the cost model cannot simulate the schedule: " + r.schedule.predictionError);
  const std::string label = "predicted (cost model, profile: " + r.schedule.profileName + "), unvalidated";
  Timeline(p, r, r.schedule.prediction, label, planPath, os).write();
  return llvm::Error::success();
}

llvm::Error writeMeasuredTimeline(const Plan &p, const PlanReport &r, const MachineProfile &profile,
                                  const std::vector<std::pair<double, double>> &times, const std::string &what,
                                  const std::string &planPath, llvm::raw_ostream &os) {
  if (!r.hasSchedule) return err("the plan has no streaming schedule (compiled for the CPU only): no timeline to draw");
  auto measured = measuredStep(p, profile, times);
  if (!measured) return measured.takeError();
  std::string label = "measured: " + what;
  if (r.schedule.predicted) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "; the cost model predicts %.4g s (bottleneck %s), measured %.4g s (bottleneck %s)",
                  r.schedule.prediction.stepSeconds, laneName(r.schedule.prediction.bottleneck), measured->stepSeconds,
                  laneName(measured->bottleneck));
    label += buf;
  }
  Timeline(p, r, *measured, label, planPath, os).write();
  return llvm::Error::success();
}

} // namespace megac::plan
