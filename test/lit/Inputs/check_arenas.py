# Checks the arena lines of `megac plan --schedule`: for every program, the
# peak bytes live <= the arena <= the sum of its buffers, the arena is
# 256-aligned, and the ARENA region holds the largest arena.
import re
import sys

text = open(sys.argv[1]).read()
arenas = re.findall(r"^  (\S+) (forward|backward|forward_keep|backward_kept): (\d+); (\d+); (\d+)$", text, re.M)
# 3 templates' forward and backward; the keep programs of layer.0 and head.
assert len(arenas) == 10, arenas
for name, kind, arena, total, peak in arenas:
    arena, total, peak = int(arena), int(total), int(peak)
    assert peak <= arena <= total, (name, kind, arena, total, peak)
    assert arena % 256 == 0
region = int(re.search(r"ARENA 0: offset \d+, (\d+) bytes", text).group(1))
assert region == max(int(a[2]) for a in arenas), region
print("ok", len(arenas), "arenas")
