"""Experiment tool: an ncu report's per-SASS-instruction counters, summed by opcode and
divided by the instructions executed, for the opcodes asked for (the copies and the
fragment loads by default). This is how the twenty-eighth session compared the
shared-memory wavefronts and L2 sectors of each LDGSTS with CUTLASS's
(docs/NOTES.md); run on the GPU machine, where ncu is:

    ncu --section SourceCounters -k regex:KERNEL -c 1 -o REPORT python3 ...   # one launch
    python -m bench.experiments.ncu_sass_table REPORT.ncu-rep [--opcodes LDGSTS LDSM]

Reads `ncu -i REPORT --page source --print-source sass --csv` (or a CSV saved from it,
``--csv FILE``). Columns are matched by name, case-insensitively: the executed count is
the first holding "instructions executed"; the counters are every column holding
"sectors" or "wavefronts" (with their "ideal" or "theoretical" forms where ncu gives
them). Prints, per opcode, the instructions executed and each counter per instruction;
with no such columns it lists the ones the report has.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
import sys
from collections import defaultdict

DEFAULT_OPCODES = ("LDGSTS", "LDSM", "LDS", "STS", "LDG", "STG")


def number(text: str) -> float | None:
    """A CSV cell as a number ('1,234' and '1 234' included), or None."""
    cleaned = text.replace(",", "").replace(" ", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        return None


def opcode_of(source: str) -> str:
    """'@P0 LDGSTS.E.BYPASS.LTC128B.128 [R1], [R2.64] ;' -> 'LDGSTS'."""
    tokens = [t for t in source.strip().split() if not t.startswith("@")]
    return tokens[0].split(".")[0] if tokens else ""


def table(rows: list[dict[str, str]], opcodes: tuple[str, ...]) -> tuple[str, list[str], dict]:
    """(the executed-count column, the counter columns, {opcode: {column: sum}})."""
    columns = list(rows[0]) if rows else []
    source = next((c for c in columns if c.strip().lower() == "source"), None)
    executed = next((c for c in columns if "instructions executed" in c.lower()), None)
    counters = [c for c in columns if re.search(r"sectors|wavefronts", c, re.IGNORECASE)]
    if source is None or executed is None or not counters:
        return "", [], {"columns": columns}
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        op = opcode_of(row.get(source, ""))
        if op not in opcodes:
            continue
        for column in [executed, *counters]:
            value = number(row.get(column, ""))
            if value is not None:
                sums[op][column] += value
    return executed, counters, sums


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", nargs="?", help="an .ncu-rep file (ncu -i reads it)")
    ap.add_argument("--csv", help="the source page's CSV, already exported")
    ap.add_argument("--opcodes", nargs="+", default=list(DEFAULT_OPCODES))
    args = ap.parse_args()
    if args.csv:
        with open(args.csv, newline="") as f:
            text = f.read()
    elif args.report:
        text = subprocess.run(["ncu", "-i", args.report, "--page", "source", "--print-source", "sass", "--csv"],
                              check=True, capture_output=True, text=True).stdout  # fmt: skip
    else:
        ap.error("give a report or --csv")
    # ncu may print lines before the CSV header (its own notes): start at the first quoted one.
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"')), 0)
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    executed, counters, sums = table(rows, tuple(args.opcodes))
    if not executed:
        print("no source column, executed-instruction column or sector/wavefront columns; the report has:")
        for column in sums.get("columns", []):
            print(f"  {column}")
        sys.exit(1)
    print("| opcode | executed | " + " | ".join(f"{c} per instr" for c in counters) + " |")
    print("|---|---:|" + "---:|" * len(counters))
    for op in args.opcodes:
        if op not in sums:
            continue
        count = sums[op][executed]
        cells = [f"{sums[op][c] / count:.2f}" if count else "-" for c in counters]
        print(f"| {op} | {count:.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
