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

With --stalls N, the warp-state samples instead (collect with `--section SourceCounters
--section WarpStateStats`): the N instructions with the most samples, in address order,
each with its share of all samples, then the samples summed by opcode. The column read
is the first whose name holds "stall sampling" and "all samples" (else "stall
sampling"): where a loop's time goes, e.g. which instruction a consumer warp waits at
between its wgmma and the next (docs/NOTES.md, thirty-fourth session).
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


def source_rows(text: str) -> list[dict[str, str]]:
    """The source page's rows from `ncu -i R --page source --csv` output. ncu may print
    lines before the CSV header (its own notes, and a "Kernel Name" line with the name on
    the next): the header is the first quoted line naming a "Source" column."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"') and '"Source"' in line), 0)
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def stall_column(columns: list[str]) -> str | None:
    """The warp-state sampling column of all samples, else any stall-sampling column."""
    stalls = [c for c in columns if "stall sampling" in c.lower()]
    return next((c for c in stalls if "all samples" in c.lower()), stalls[0] if stalls else None)


def stall_lines(rows: list[dict[str, str]], top: int) -> tuple[str | None, float, list[tuple[str, str, float]],
                                                                  dict[str, float]]:
    """(the column, all samples, the ``top`` instructions with the most samples in the
    report's order as (address, source, samples), {opcode: samples})."""
    columns = list(rows[0]) if rows else []
    column = stall_column(columns)
    source = next((c for c in columns if c.strip().lower() == "source"), None)
    address = next((c for c in columns if c.strip().lower() == "address"), None)
    if column is None or source is None:
        return None, 0.0, [], {}
    lines, by_op = [], defaultdict(float)
    for i, row in enumerate(rows):
        samples = number(row.get(column, "")) or 0.0
        lines.append((i, row.get(address, str(i)) if address else str(i), row.get(source, "").strip(), samples))
        by_op[opcode_of(row.get(source, ""))] += samples
    total = sum(line[3] for line in lines)
    kept = sorted(sorted(lines, key=lambda line: -line[3])[:top])
    return column, total, [(a, src, n) for _, a, src, n in kept], dict(by_op)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", nargs="?", help="an .ncu-rep file (ncu -i reads it)")
    ap.add_argument("--csv", help="the source page's CSV, already exported")
    ap.add_argument("--opcodes", nargs="+", default=list(DEFAULT_OPCODES))
    ap.add_argument("--stalls", type=int, metavar="N", help="the N instructions with the most warp-state samples")
    args = ap.parse_args()
    if args.csv:
        with open(args.csv, newline="") as f:
            text = f.read()
    elif args.report:
        text = subprocess.run(["ncu", "-i", args.report, "--page", "source", "--print-source", "sass", "--csv"],
                              check=True, capture_output=True, text=True).stdout  # fmt: skip
    else:
        ap.error("give a report or --csv")
    rows = source_rows(text)
    if args.stalls:
        column, total, kept, by_op = stall_lines(rows, args.stalls)
        if column is None or not total:
            print("no source or stall-sampling column (or no samples); the report has:")
            for name in (list(rows[0]) if rows else []):
                print(f"  {name}")
            sys.exit(1)
        print(f"{column}: {total:.0f} samples\n\n| address | instruction | samples | share |\n|---|---|---:|---:|")
        for addr, src, n in kept:
            print(f"| {addr} | `{src}` | {n:.0f} | {n / total:.1%} |")
        print("\n| opcode | samples | share |\n|---|---:|---:|")
        for op, n in sorted(by_op.items(), key=lambda item: -item[1]):
            if n:
                print(f"| {op} | {n:.0f} | {n / total:.1%} |")
        return
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
