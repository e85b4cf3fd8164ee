"""Side-by-side measurement for the A/B benchmarks: the two kinds alternate over the repeats (A B, B A, ...), so a
busy spell of a shared machine does not fall on one kind; the summary keeps each kind's median and range."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path


def cpu_kind() -> str:
    """This CPU's model and its bfloat16 instructions, for every figure a benchmark prints (machines differ)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = [flag for flag in ("amx_bf16", "avx512_bf16") if flag in text]
    flags += [] if "amx_bf16" in flags else ["no AMX"]
    return f"{name} ({', '.join(flags)})"


def interleaved(repeats: int, kinds: tuple[str, str], sample: Callable[[Path, str], dict], prefix: str) -> list[dict]:
    """`sample(folder, kind)` for each kind per repeat, each in a new scratch folder; prints each row."""
    rows = []
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        for repeat in range(repeats):
            for kind in kinds if repeat % 2 == 0 else kinds[::-1]:
                folder = Path(scratch) / f"{repeat}-{kind}"
                folder.mkdir()
                row = {"repeat": repeat, "kind": kind, **sample(folder, kind)}
                rows.append(row)
                shown = "  ".join(f"{k} {v}" for k, v in row.items() if k not in ("repeat", "kind"))
                print(f"repeat {repeat}  {kind:12}  {shown}", flush=True)
    return rows


def summary(rows: list[dict], kinds: tuple[str, str], keys: tuple[str, ...]) -> dict:
    """Per kind and key: median, min, max; per key the ratio of the medians, first kind / second. Printed too."""
    result: dict = {}
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        result[kind] = {
            key: {
                "median": statistics.median(r[key] for r in mine),
                "min": min(r[key] for r in mine),
                "max": max(r[key] for r in mine),
            }
            for key in keys
        }
    first, second = kinds
    for key in keys:
        ratio = result[first][key]["median"] / result[second][key]["median"]
        result[f"{key}_ratio"] = round(ratio, 3)
        print(f"{key}: {first} {result[first][key]}  {second} {result[second][key]}  ratio {ratio:.2f}")
    return result
