#!/usr/bin/env bash
# Reads one compute-sanitizer log and says whether its reports are all known:
# every kernel a report names ("access at KERNEL+0x..", "at KERNEL+0x.." or
# "in KERNEL", by the tool's version) must match a line of the known list
# (default tools/sanitizer-known.txt: kernels inside cuDNN, not megac's to fix).
# Exit 0 and "only known reports: ..." when so; exit 1 and "FAILED" naming the
# unknown kernels, or saying none was named, otherwise. tools/gpu-check.sh
# runs it on each sanitizer run that exited nonzero.
# Usage: tools/sanitizer-triage.sh LOG [KNOWN]
set -uo pipefail
log=${1:?usage: sanitizer-triage.sh LOG [KNOWN]}
known=${2:-$(dirname "$0")/sanitizer-known.txt}
[ -r "$log" ] || { echo "sanitizer-triage: cannot read $log" >&2; exit 2; }
[ -r "$known" ] || { echo "sanitizer-triage: cannot read $known" >&2; exit 2; }
# Names may be demangled C++ ("void megac::cuda::k<float>(const float *, long)").
kernels=$(sed -nE '/^=========/{
  s/.* access at (.*)\+0x[0-9a-f]+( \[[0-9]+ hazards?\])?[[:space:]]*$/\1/p; t
  s/^=========[[:space:]]+at 0x[0-9a-f]+ in (.*[^[:space:]])[[:space:]]*$/\1/p; t
  s/^=========[[:space:]]+at (.*)\+0x[0-9a-f]+.*$/\1/p
}' "$log" | sort -u)
patterns=$(grep -v -E '^[[:space:]]*(#|$)' "$known")
joined() { printf '%s\n' "$1" | paste -sd '|' | sed 's/|/; /g'; } # one line, "; " between
if [ -z "$kernels" ]; then
  echo "FAILED: the run failed and its log names no kernel"
  exit 1
fi
if [ -z "$patterns" ]; then
  unknown=$kernels
else
  unknown=$(printf '%s\n' "$kernels" | grep -v -E -e "$patterns" || true)
fi
if [ -n "$unknown" ]; then
  echo "FAILED: reports in kernels not listed in $(basename "$known"): $(joined "$unknown")"
  exit 1
fi
echo "only known reports ($(basename "$known")): $(joined "$kernels")"
