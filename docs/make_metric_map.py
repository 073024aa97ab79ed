"""Write compare/data/metric_map.json, the cross-version map of ncu metric names, from the
section files of the installed ncu and every ncu report of the corpus.

    python docs/make_metric_map.py          # rewrite the data file
    python docs/make_metric_map.py --check  # exit 1, writing nothing, where it would change

A maintainer's script, like make_cli.py: the evidence and the rules are the library's
(`triage.compare.metric_map_build`); tests/test_renames.py rebuilds the map and fails where
the committed file differs. docs/comparing.md says how the map is read."""

from __future__ import annotations

import argparse
import os
import sys

from triage.archive.atomic import write_bytes
from triage.compare.metric_map_build import build_map, map_text, observations
from triage.compare.renames import MAP_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1, writing nothing, where the file would change")
    parser.add_argument("--corpus", default=os.environ.get("TRIAGE_CORPUS"),
                        help="the corpus folder (default: $TRIAGE_CORPUS)")
    args = parser.parse_args(argv)
    text = map_text(build_map(observations(args.corpus)))
    if args.check:
        same = MAP_FILE.exists() and MAP_FILE.read_text() == text
        print("up to date" if same else f"{MAP_FILE} is out of date: run this without --check")
        return 0 if same else 1
    write_bytes(MAP_FILE, text.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
