"""`python -m bench [memory] [sampler] [training] [accuracy] [gpu] [--option value ...]`: run benchmarks in turn.

Options after the names go to every benchmark that knows them (e.g. `--nodes 200000`).
Each prints its table and ratios and writes bench/results/<name>-<time>.json.
"""

from __future__ import annotations

import importlib
import sys
import time

BENCHES = ("memory", "evalmem", "evalchunks", "plan", "sampler", "training", "accuracy", "gpu", "sharded")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--check-names NAMES...`: only say whether the names are known (make bench asks before it
    # spends minutes building the pyg-lib anchor).
    check_only = bool(argv) and argv[0] == "--check-names"
    if check_only:
        argv.pop(0)
    names = []
    while argv and not argv[0].startswith("-"):
        names.append(argv.pop(0))
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"error: unknown benchmark {', '.join(unknown)}; expected some of: {', '.join(BENCHES)}.",
              file=sys.stderr)
        return 2
    if check_only:
        return 0
    for name in names or BENCHES:
        started = time.perf_counter()
        print(f"\n=== bench {name} ===", flush=True)
        code = importlib.import_module(f"bench.{name}").main(argv)
        if code:  # e.g. a benchmark re-run in the pyg-lib anchor's Python that failed there
            return code
        print(f"=== bench {name}: {time.perf_counter() - started:.0f} s ===", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
