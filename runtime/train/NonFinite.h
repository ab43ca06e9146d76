#pragma once
// Non-finite values in training: the check of each unit's gradients before
// its AdamW update, and the error that carries what was found, so that the
// training loop can tell it from other failures and diagnose the step.
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::runtime {

// The first element of data[0..n) that is NaN or infinite, or -1 (on the
// CPU's threads).
int64_t firstNonFinite(const float *data, int64_t n);

// Fault injection for the tests, on every backend: MEGAC_INJECT_NAN=UNIT or
// UNIT@STEP makes element 0 of the first parameter gradient of the unit named
// UNIT NaN, right after its BACKWARD at optimizer step STEP (default 1).
struct NanInjection {
  std::string unit;
  int64_t step = 1;
  bool at(const std::string &unitName, int64_t optimizerStep) const {
    return unitName == unit && optimizerStep == step;
  }
};
std::optional<NanInjection> nanInjectionFromEnvironment();
// An injection variable's WHAT or WHAT@STEP (STEP 1 where not given); none where unset or empty.
std::optional<std::pair<std::string, int64_t>> injectionFromEnvironment(const char *variable);

// What a NonFiniteError says of a unit's gradient: "unit 'U' backward: the
// gradient of 'P' holds VALUE at element E[ (WHERE)]; its update and the rest
// of the step were stopped". Every backend's check words it so.
std::string nonFiniteGradientMessage(const std::string &unit, const std::string &param, const std::string &value,
                                     int64_t element, const std::string &where = "");
// The units a step had updated, as NonFiniteError lists them: "unit 'a', 'b'" ("" for none);
// with the units whose token-indexed tables' unread rows had stepped early
// (runtime/plan/TokenRows.h): "... and the rows no token read of unit 'embed'".
std::string updatedUnitList(const std::vector<std::string> &names, const std::vector<std::string> &unreadRowsOf = {});

// A NaN or Inf in a step's loss or gradients. The message names what held
// it; `updatedUnits` lists the units whose AdamW update this step already
// applied (their weights changed before the value was found).
class NonFiniteError : public llvm::ErrorInfo<NonFiniteError> {
public:
  static char ID;
  NonFiniteError(std::string what, std::string updatedUnits) : what_(std::move(what)), updated_(std::move(updatedUnits)) {}
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }
  const std::string &updatedUnits() const { return updated_; }

private:
  std::string what_, updated_;
};

} // namespace megac::runtime
