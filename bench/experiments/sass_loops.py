"""Experiment tool: the MMA loops of compiled kernels, read from their SASS. For each
kernel: registers and spills, then every loop (a backward branch) whose body holds an
MMA (HMMA, HGMMA): its static instruction count, its branches and its opcodes by count,
and with --order the issue order of its body as one line of symbols (below), which is
where a loop split into basic blocks shows (ptxas schedules inside a block only):

    python -m bench.experiments.sass_loops --match 128x256x64 _nk_ [--config YAML] [--arch 90]
        [-D GEMM_SM80_LEAN_LOOP=0] [--order]
    python -m bench.experiments.sass_loops --cubin FILE [--order]   # any cubin, e.g. CUTLASS's

Without --config the default set's YAML files are read; --match keeps the kernels whose
name holds every substring. cuobjdump comes from $CUOBJDUMP, PATH, or the pip wheel
(`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`: cuobjdump runs nvdisasm, looked
for beside it first). Symbols: M an MMA, L ldmatrix, s another shared
load, G cp.async, W a TMA or bulk copy, | a CTA barrier, D a cp.async wait, b a branch,
. anything else.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

MMA_OPCODES = ("HMMA", "HGMMA", "IMMA", "QGMMA")
_SYMBOLS = {"HMMA": "M", "HGMMA": "M", "IMMA": "M", "QGMMA": "M", "LDSM": "L", "LDS": "s", "LDGSTS": "G",
            "UTMALDG": "W", "UBLKCP": "W", "BAR": "|", "DEPBAR": "D", "BRA": "b"}  # fmt: skip
_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_FUNCTION = re.compile(r"^\s+Function : (\S+)")


@dataclass(frozen=True)
class Instr:
    address: int
    opcode: str  # the mnemonic without its modifiers: "HMMA" of "HMMA.16816.F32"
    text: str


@dataclass(frozen=True)
class Loop:
    body: tuple[Instr, ...]

    @property
    def start(self) -> int:
        return self.body[0].address

    def counts(self) -> Counter:
        return Counter(i.opcode for i in self.body)

    def mmas(self) -> int:
        return sum(i.opcode in MMA_OPCODES for i in self.body)

    def order(self) -> str:
        return "".join(_SYMBOLS.get(i.opcode, ".") for i in self.body)


def parse_sass(text: str) -> dict[str, list[Instr]]:
    """`cuobjdump -sass` output -> each function's instructions in address order."""
    functions: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in text.splitlines():
        f = _FUNCTION.match(line)
        if f:
            current = functions.setdefault(f.group(1), [])
            continue
        m = _LINE.match(line)
        if m and current is not None:
            body = m.group(2).strip().rstrip(";").strip()
            words = body.split()
            if words and words[0].startswith("@"):  # a predicate guard
                words = words[1:]
            if words:
                current.append(Instr(int(m.group(1), 16), words[0].split(".")[0], body))
    return functions


def branch_target(instr: Instr) -> int | None:
    if instr.opcode != "BRA":
        return None
    m = re.search(r"0x([0-9a-f]+)", instr.text.split("BRA", 1)[1])
    return int(m.group(1), 16) if m else None


def mma_loops(instrs: list[Instr], min_body: int = 0) -> list[Loop]:
    """Every backward branch's body (target .. branch) that holds an MMA, outermost last
    for loops that share a start; with ``min_body``, every body of at least that many
    instructions instead, MMA or not (a variant built without its MMAs)."""
    at = {i.address: n for n, i in enumerate(instrs)}
    found = []
    for n, instr in enumerate(instrs):
        target = branch_target(instr)
        if target is not None and target <= instr.address and target in at:
            loop = Loop(tuple(instrs[at[target]:n + 1]))
            if (loop.mmas() if not min_body else len(loop.body) >= min_body):
                found.append(loop)
    return found


def describe(loop: Loop, order: bool, top: int = 24) -> str:
    counts = loop.counts()
    head = (f"  loop at {loop.start:#06x}: {len(loop.body)} instructions, {loop.mmas()} MMA, "
            f"{counts.get('BRA', 0)} branches")  # fmt: skip
    lines = [head, "    " + ", ".join(f"{op} {c}" for op, c in counts.most_common(top))]
    if order:
        s = loop.order()
        lines += ["    " + s[k:k + 100] for k in range(0, len(s), 100)]
    return "\n".join(lines)


def find_cuobjdump() -> str:
    candidates = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    for base in sys.path:
        candidates.append(str(Path(base) / "nvidia" / "cu13" / "bin" / "cuobjdump"))
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise SystemExit("cuobjdump not found: set CUOBJDUMP, put it on PATH, or pip install nvidia-cuda-cuobjdump")


def sass_of(cubin: Path, cuobjdump: str) -> str:
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(cuobjdump).parent), os.environ.get("PATH", "")]))
    return subprocess.run([cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True, env=env).stdout


def report_cubin(cubin: Path, cuobjdump: str, order: bool, min_body: int = 0) -> None:
    for name, instrs in parse_sass(sass_of(cubin, cuobjdump)).items():
        print(f"{name[:100]}: {len(instrs)} instructions")
        for loop in mma_loops(instrs, min_body):
            print(describe(loop, order))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--match", nargs="+", default=[], help="substrings every kernel name kept must hold")
    ap.add_argument("--config", nargs="+", type=Path, help="YAML files (default: the default set's)")
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("-D", dest="defines", action="append", default=[], help="a macro for the compile, e.g. X=0")
    ap.add_argument("--order", action="store_true", help="print each loop's issue order as symbols")
    ap.add_argument("--cubin", type=Path, help="read this cubin instead of compiling")
    ap.add_argument("--min-body", type=int, default=0,
                    help="report every loop of at least this many instructions, with or without MMAs")
    args = ap.parse_args()
    cuobjdump = find_cuobjdump()
    if args.cubin:
        report_cubin(args.cubin, cuobjdump, args.order, args.min_body)
        return
    from codegen.config import default_config_paths, load_configs
    from codegen.render import render_kernel
    from gemm_runtime.build import INCLUDE_DIR
    from gemm_runtime.compiler import compile_cubin

    kernels = [k.spec for k in load_configs(args.config or default_config_paths())
               if all(s in k.spec.name for s in args.match)]  # fmt: skip
    if not kernels:
        raise SystemExit(f"no kernel name holds all of {args.match}")
    options = [f"-D{d}" for d in args.defines]
    with tempfile.TemporaryDirectory() as tmp:
        for spec in kernels:
            if not spec.arch_min <= args.arch <= spec.arch_max:
                continue
            target = spec.mainloop.nvrtc_target(args.arch)
            result = compile_cubin(render_kernel(spec, spec.name), name=spec.name, arch=args.arch,
                                   include_dirs=[INCLUDE_DIR], options=options, cache_dir=None,
                                   target=None if target == f"sm_{args.arch}" else target)  # fmt: skip
            cubin = Path(tmp) / f"{spec.name}.cubin"
            cubin.write_bytes(result.cubin)
            print(f"{spec.name}: {result.registers} registers, spills {result.spill_stores} / {result.spill_loads} bytes")
            report_cubin(cubin, cuobjdump, args.order, args.min_body)


if __name__ == "__main__":
    main()
