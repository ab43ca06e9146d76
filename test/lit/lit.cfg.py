import os
import shutil
import lit.formats

config.name = "megac"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.megac_bin_dir, "test", "lit")
config.excludes = ["Inputs"]
config.substitutions.append(("%megac", os.path.join(config.megac_bin_dir, "megac")))
config.substitutions.append(("%FileCheck", config.filecheck))
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%data", os.path.join(config.megac_src_dir, "test", "data")))
config.substitutions.append(("%inputs", os.path.join(os.path.dirname(__file__), "Inputs")))
config.substitutions.append(("%tools", os.path.join(config.megac_src_dir, "tools")))
config.environment["MEGAC_THREADS"] = "2"
# The CPU stream executor checks every read of its simulated device memory
# against the write it expects (runtime/stream/StreamExecutor.h).
config.environment["MEGAC_CHECK_READS"] = "1"
# `not` (expect failure), like FileCheck, comes from the LLVM tools directory.
config.environment["PATH"] = config.environment["PATH"] + os.pathsep + os.path.dirname(config.filecheck)
# Headless Chromium (Debian's `chromium`) renders the `megac plan --html`
# page in plan-timeline-chromium.test; without it that test is UNSUPPORTED.
if shutil.which("chromium"):
    config.available_features.add("chromium")
