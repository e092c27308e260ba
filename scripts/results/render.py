#!/usr/bin/env python3
"""Every results page in docs/results, rendered from the results files beside it, never by hand.

Usage:
  python3 scripts/results/render.py [PAGE ...]     render these pages (default: every one)
  python3 scripts/results/render.py --check        write nothing; exit 1 naming each stale page
  python3 scripts/results/render.py PAGE --from DIR [--out FILE]
                                                   one page from another results directory
                                                   (to stdout without --out)

Each page reads docs/results/<its directory>/, which names the machine (CPU, cores, SIMD level),
the commit, the date and the command of the measurement; a page whose files do not is not
printed (exit status 2). The scripts that measure (bench_all.sh, python_score.sh,
reward_cost.sh, quality.sh, roofline.sh, delta.sh, scale.sh, broadcast.sh, scripts/peer/sctorch_regions.sh) write those files and call this
one.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_table  # noqa: E402
import broadcast_table  # noqa: E402
import delta_table  # noqa: E402
import quality_table  # noqa: E402
import reward_table  # noqa: E402
import roofline_table  # noqa: E402
import scale_table  # noqa: E402
import score_table  # noqa: E402
import sctorch_table  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"

# page in docs/results -> (its results directory there, its renderer)
PAGES = {
    "performance.md": ("bench-all", bench_table.render),
    "benchmark.md": ("benchmark", quality_table.render),
    "python-score.md": ("python-score", score_table.render),
    "reward-cost.md": ("reward-cost", reward_table.render),
    "sctorch.md": ("sctorch", sctorch_table.render),
    "roofline.md": ("roofline", roofline_table.render),
    "delta.md": ("delta", delta_table.render),
    "scale.md": ("scale", scale_table.render),
    "broadcast.md": ("broadcast", broadcast_table.render),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", help=f"of {', '.join(PAGES)}")
    ap.add_argument("--check", action="store_true", help="exit 1 if a page is not its rendering")
    ap.add_argument("--from", dest="source", type=Path, help="render one page from this directory")
    ap.add_argument("--out", type=Path, help="with --from: write the page here")
    a = ap.parse_args()
    unknown = [p for p in a.pages if p not in PAGES]
    if unknown:
        ap.error(f"no page {', '.join(unknown)}; the pages are {', '.join(PAGES)}")
    if a.source:
        if len(a.pages) != 1:
            ap.error("--from renders one page: name it")
        page = PAGES[a.pages[0]][1](a.source)
        (a.out.write_text if a.out else sys.stdout.write)(page)
        return
    stale = []
    for name in a.pages or PAGES:
        directory, render = PAGES[name]
        page, path = render(RESULTS / directory), RESULTS / name
        if a.check:
            if not path.exists() or path.read_text() != page:
                stale.append(name)
        else:
            path.write_text(page)
    if stale:
        sys.exit("stale: " + ", ".join(f"docs/results/{n}" for n in stale)
                 + " (run python3 scripts/results/render.py after its measuring script)")


if __name__ == "__main__":
    main()
