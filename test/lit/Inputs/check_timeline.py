"""Checks a `megac plan --html` page against the plan's `--json` summary.

check_timeline.py PAGE.html PLAN.json [--dom]

The page must hold exactly one bar (<rect class="bar ...">) per schedule
action (data-action 0..N-1, each once), in one of the four lanes, each bar
inside the lane group named like its data-lane, with a <title> tooltip, and
the memory chart's path. With --dom, PAGE is Chromium's --dump-dom of the
page: the inline script must have run and counted every bar as rendered
(body data-rendered-bars == N, data-lanes == 4). Prints one line per check.
"""
import json
import sys
from html.parser import HTMLParser

LANES = ["H2D", "compute", "D2H", "CPU"]


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.bars = []  # (attrs, lane group it sits in)
        self.lane = None
        self.depth_in_lane = 0
        self.body = {}
        self.titles_in_bars = 0
        self.in_bar = False
        self.memory_path = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "body":
            self.body = a
        if tag == "g" and "lane" in classes:
            self.lane = a.get("data-lane")
        if tag == "rect" and "bar" in classes:
            self.bars.append((a, self.lane))
            self.in_bar = True
        if tag == "title" and self.in_bar:
            self.titles_in_bars += 1
        if tag == "path" and "memory" in classes:
            self.memory_path = True

    def handle_endtag(self, tag):
        if tag == "rect":
            self.in_bar = False
        if tag == "g":
            self.lane = None


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    page_path, json_path = sys.argv[1], sys.argv[2]
    dom = "--dom" in sys.argv[3:]
    with open(json_path) as f:
        summary = json.load(f)
    actions = summary["prediction"]["actions"]
    page = Page()
    with open(page_path, encoding="utf-8") as f:
        page.feed(f.read())
    ids = sorted(int(a["data-action"]) for a, _ in page.bars)
    if ids != list(range(actions)):
        fail("bars for actions %s, expected 0..%d" % (ids, actions - 1))
    print("bars: %d, one per action" % len(ids))
    for a, lane in page.bars:
        if a.get("data-lane") not in LANES or a.get("data-lane") != lane:
            fail("bar %s in lane group %s, says %s" % (a["data-action"], lane, a.get("data-lane")))
        if not (float(a["width"]) > 0 and float(a["height"]) > 0):
            fail("bar %s has no size" % a["data-action"])
    used = sorted({lane for _, lane in page.bars}, key=LANES.index)
    print("lanes with bars: " + " ".join(used))
    if page.titles_in_bars != len(page.bars):
        fail("%d of %d bars have a tooltip" % (page.titles_in_bars, len(page.bars)))
    print("tooltips: %d" % page.titles_in_bars)
    if not page.memory_path:
        fail("no memory chart")
    print("memory chart: yes")
    if dom:
        rendered = page.body.get("data-rendered-bars")
        if rendered != str(actions):
            fail("the browser rendered %s bars of %d" % (rendered, actions))
        print("rendered bars: %s, lanes: %s" % (rendered, page.body.get("data-lanes")))


main()
