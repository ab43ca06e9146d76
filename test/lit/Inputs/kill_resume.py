"""For each STAGE: trains `megac run PLAN --text TEXT --steps 6
--checkpoint-every 2` into a fresh checkpoint directory with
MEGAC_CHECKPOINT_CRASH_AT=STEP:STAGE, expects the run to die of SIGKILL,
resumes it (--resume into the same directory) and compares the step-6
checkpoint's files with REF's byte for byte.

usage: kill_resume.py MEGAC PLAN TEXT REF_DIR STEP STAGE...
"""
import filecmp
import os
import re
import shutil
import signal
import subprocess
import sys

megac, plan, text, ref, step = sys.argv[1:6]
base = os.path.join(os.path.dirname(ref), "kill-" + step)
for stage in sys.argv[6:]:
    ck = os.path.join(base, stage)
    shutil.rmtree(ck, ignore_errors=True)
    cmd = [megac, "run", plan, "--text", text, "--steps", "6", "--device", "cpu", "--checkpoint-dir", ck,
           "--checkpoint-every", "2"]
    env = dict(os.environ, MEGAC_CHECKPOINT_CRASH_AT=step + ":" + stage)
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != -signal.SIGKILL:
        sys.exit("%s: the run was not killed (exit %d): %s" % (stage, r.returncode, r.stderr))
    r = subprocess.run(cmd + ["--resume", ck], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("%s: the resume failed: %s" % (stage, r.stderr))
    m = re.search(r"resumed from .* at step (\d+)", r.stdout)
    last = os.path.join(ck, "step-00000006")
    same = all(filecmp.cmp(os.path.join(last, f), os.path.join(ref, "step-00000006", f), shallow=False)
               for f in ("params.f32", "adam_m.f32", "adam_v.f32", "checkpoint.meta"))
    leftovers = [n for n in os.listdir(ck) if n.startswith(".tmp")]
    print("%s: killed; resumed at step %s; step 6 %s%s" % (stage, m.group(1) if m else "?",
                                                          "identical" if same else "DIFFERENT",
                                                          "; leftovers " + str(leftovers) if leftovers else ""))
