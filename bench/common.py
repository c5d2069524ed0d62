"""What the throughput benchmarks (auth.py, grpc.py, rate_limiting.py) share: their common
options, the tools check, measuring contenders in turn round after round, the result file, and
stopping what they started."""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

REPO = Path(__file__).resolve().parent.parent


def parser(doc: str) -> argparse.ArgumentParser:
    """The command line of a benchmark described by `doc`, with the options they all take."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", type=Path, default=REPO / "target/release/weir")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    return ap


def have(tools: Iterable[str]) -> bool:
    """Whether every one of `tools` is installed; says which is missing when one is not."""
    for tool in tools:
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            print(f"missing {tool}", file=sys.stderr)
            return False
    return True


def measure(names: Iterable[str], one: Callable[[str, int], float], seconds: int,
            rounds: int) -> dict:
    """The median requests per second of each of `names`, `one(name, seconds)` measuring one.
    Each is warmed up for a second first (a failing one fails there); then they are measured
    in turn, round after round, so that drift affects them alike."""
    names = list(names)
    for n in names:
        one(n, 1)
    rps = {n: [] for n in names}
    for i in range(rounds):
        for n in names:
            rps[n].append(one(n, seconds))
        print(f"round {i + 1}: " + ", ".join(f"{n} {rps[n][-1]:,.0f}" for n in names),
              file=sys.stderr)
    return {n: statistics.median(v) for n, v in rps.items()}


def ratios(med: dict, base: str) -> dict:
    """Each median as a ratio to `base`'s."""
    return {n: round(v / med[base], 3) for n, v in med.items()}


def write(name: str, result: dict) -> None:
    """Prints `result` and writes it to bench/results/<name>.json."""
    print(json.dumps(result, indent=2))
    out = REPO / f"bench/results/{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


def stop(procs: list, tmp: Path) -> None:
    """Stops the processes a benchmark started (killing those slow to go) and removes its
    temporary folder."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
