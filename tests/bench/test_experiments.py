"""The experiments under bench/experiments/ are run by hand on the GPU machine, rarely:
each must still import against today's runtime and offer its entry point, so that a
renamed helper breaks CI rather than the next device session."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "bench" / "experiments").glob("*.py")
                     if p.stem != "__init__")  # fmt: skip


def test_there_are_experiments():
    assert "sm90_quant_decode" in EXPERIMENTS and "build_ab" in EXPERIMENTS


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_imports_and_has_main(name):
    module = importlib.import_module(f"bench.experiments.{name}")
    assert callable(getattr(module, "main", None)), f"bench/experiments/{name}.py has no main()"


def test_the_wgmma_rate_probes_compile_for_sm90a_without_spills():
    """bench/experiments/wgmma_rate.py's probe kernels, both operand forms, both kinds of
    instruction beside them and one or two weight blocks per warpgroup (no GPU needed).
    The uniform chains feed the B descriptor, so their sum is in every probe's result."""
    from bench.experiments.wgmma_rate import Probe, compile_probes
    from gemm_runtime.compiler import CompileError

    probes = [Probe(64, True, 64, 2), Probe(256, True, 0, 1, handshake=True), Probe(128, False, 64, 2, op="hfma2"),
              Probe(64, True, 32, 1, op="hfma2"), Probe(64, True, 128, 2, blocks=2), Probe(64, False, 64, 1, blocks=2),
              Probe(64, True, 64, 1, op="alu_imm"), Probe(256, True, 128, 2, op="uniform"),
              Probe(64, False, 64, 2, op="uniform", blocks=2), Probe(64, True, 128, 4, op="lop3")]
    assert all(p.fits_register_file for p in probes)
    # 128 accumulators a thread where four warpgroups leave 128 registers: ptxas refuses it
    assert not Probe(256, True, 0, 4).fits_register_file
    try:
        built = compile_probes(probes)
    except CompileError as err:
        pytest.fail(str(err))
    for probe, result in built:
        assert result.cubin and result.spill_stores == result.spill_loads == 0, (probe, result.log)
    assert len({p.name for p in probes}) == len(probes)
    with pytest.raises(ValueError, match="op: got 'iadd'"):
        Probe(64, True, 8, 1, op="iadd")
    with pytest.raises(ValueError, match="blocks: got 3"):
        Probe(64, True, 8, 1, blocks=3)


def test_the_read_bound_reader_times_its_sweep():
    """read_bound.Reader keeps its sweep (fastest) as a method: the forty-third session's
    launcher, pasted inside the class, left it in the launcher's closure, where read_bound,
    read_order and gemv_probe failed on the GPU at their first read."""
    from bench.experiments.read_bound import Reader

    assert callable(getattr(Reader, "fastest", None)) and callable(getattr(Reader, "call", None))


def test_the_read_bound_and_gemv_probe_kernels_compile_without_spills():
    """bench/experiments/read_bound.py's read kernels and gemv_probe.py's forms, plain and
    swapped, at several depths (no GPU needed)."""
    from bench.experiments import gemv_probe, read_bound
    from codegen.render import INCLUDE_DIR
    from gemm_runtime.compiler import compile_cubin

    reads = compile_cubin(read_bound.source(), name="read_bound", arch=90, include_dirs=[], cache_dir=None)
    forms = [(8, 1, 2, False), (16, 2, 4, False), (8, 4, 2, False), (8, 2, 4, True), (8, 4, 8, True)]
    probes = compile_cubin(gemv_probe.source(forms), name="gemv_probe", arch=90, include_dirs=[INCLUDE_DIR],
                           cache_dir=None)  # fmt: skip
    for result in (reads, probes):
        assert result.cubin and result.spill_stores == result.spill_loads == 0, result.log
    for name in [read_bound.kernel_name(u) for u in read_bound.LOADS] + [gemv_probe.kernel_name(*f) for f in forms]:
        assert name in reads.log + probes.log, name


def test_the_merge_probe_compiles_and_knows_its_sums():
    """bench/experiments/merge_probe.py: its three merge paths compile for sm_90 without
    spills, and the sums it checks each launch against are the kernel's (no GPU needed)."""
    from bench.experiments import merge_probe
    from codegen.render import INCLUDE_DIR
    from gemm_runtime.compiler import compile_cubin

    result = compile_cubin(merge_probe.source([32, 64]), name="merge_probe", arch=90, include_dirs=[INCLUDE_DIR],
                           cache_dir=None)  # fmt: skip
    assert result.cubin and result.spill_stores == result.spill_loads == 0, result.log
    for mode in merge_probe.MODES:
        assert merge_probe.kernel_name(64, mode) in result.log
    # pair 1, thread 2: rank 0 is block 2, rank 1 block 3; 16 floats a thread
    own = sum((2 * 7 + 2 * 3 + i) % 17 for i in range(16))
    given = sum((3 * 7 + 2 * 3 + i) % 17 for i in range(16))
    assert merge_probe.expected_sums(2, 16, False)[1, 2].item() == own
    assert merge_probe.expected_sums(2, 16, True)[1, 2].item() == own + given


def test_register_cap_pairs_every_default_twin_with_its_capped_tile():
    """bench/experiments/register_cap.py times each uncapped twin beside the capped tile of
    the family it shadows; a renamed family or token would leave it timing nothing."""
    from types import SimpleNamespace

    from bench.experiments.register_cap import twins
    from codegen.config import default_config_paths, load_configs

    specs = [k.spec for k in load_configs(default_config_paths())]
    gemm = SimpleNamespace(kernels=[SimpleNamespace(name=s.name, spec=s) for s in specs])
    pairs = twins(gemm)
    assert len(pairs) == sum(1 for s in specs if s.ctas_per_sm) == 2
    by_name = {s.name: s for s in specs}
    for capped, twin in pairs:
        a, b = by_name[capped], by_name[twin]
        assert (a.cta, a.warps, a.stages, a.grouped) == (b.cta, b.warps, b.stages, b.grouped)
        assert a.min_ctas_per_sm_hopper > 1 and b.min_ctas_per_sm_hopper == 1


def test_grouped_bound_patches_every_module_that_sizes_a_grouped_launch():
    """bench/experiments/grouped_bound.py times the old bound on the same cubins by
    replacing tiles_of where a grouped launch is sized: every module of the runtime that
    imports it, and no other afterwards."""
    import ast

    import gemm_runtime.cost_model as cost_model
    from bench.experiments import grouped_bound

    runtime = Path(grouped_bound.__file__).resolve().parents[2] / "gemm_runtime"
    importers = {p.stem for p in runtime.glob("*.py")
                 if any(isinstance(node, ast.ImportFrom) and node.module == "gemm_runtime.cost_model"
                        and any(a.name == "tiles_of" for a in node.names) for node in ast.walk(ast.parse(p.read_text())))}  # fmt: skip
    # launch.py sizes dense launches only (the bound is the grouped one's).
    assert importers - {"launch"} == {"grouped", "feasibility"}
    patched = [grouped_bound.cost_model, grouped_bound.grouped, grouped_bound.feasibility]
    with grouped_bound.bound(grouped_bound.old_tiles_of):
        assert all(m.tiles_of is grouped_bound.old_tiles_of for m in patched)
    assert all(m.tiles_of is cost_model.__dict__["tiles_of"] for m in patched)
    assert cost_model.tiles_of.__module__ == "gemm_runtime.cost_model"


def test_ncu_sass_table_sums_counters_by_opcode():
    """bench/experiments/ncu_sass_table.py on a source page shaped like ncu's CSV: numbers
    with thousands separators, predicated instructions, other opcodes left out; and the
    columns listed where the counters are missing."""
    from bench.experiments.ncu_sass_table import opcode_of, table

    assert opcode_of("@!P0 LDGSTS.E.BYPASS.LTC128B.128 [R1+0x800], desc[UR4][R4.64] ;") == "LDGSTS"
    rows = [
        {"Source": "LDGSTS.E.BYPASS.128 [R1], [R2.64] ;", "Warp Instructions Executed": "1,000",
         "L2 Theoretical Sectors Global": "24,000", "Shared Memory Wavefronts": "15,000"},
        {"Source": "@P0 LDGSTS.E.BYPASS.128 [R1+0x800], [R2.64] ;", "Warp Instructions Executed": "3,000",
         "L2 Theoretical Sectors Global": "48,000", "Shared Memory Wavefronts": "12,000"},
        {"Source": "HMMA.16816.F32 R4, R8, R12, R4 ;", "Warp Instructions Executed": "9,000",
         "L2 Theoretical Sectors Global": "0", "Shared Memory Wavefronts": "0"},
    ]  # fmt: skip
    executed, counters, sums = table(rows, ("LDGSTS", "LDSM"))
    assert executed == "Warp Instructions Executed"
    assert counters == ["L2 Theoretical Sectors Global", "Shared Memory Wavefronts"]
    assert set(sums) == {"LDGSTS"}
    assert sums["LDGSTS"][executed] == 4000 and sums["LDGSTS"]["Shared Memory Wavefronts"] == 27000
    assert table([{"Source": "x", "Other": "1"}], ("LDGSTS",)) == ("", [], {"columns": ["Source", "Other"]})


def test_ncu_sass_table_ranks_instructions_by_stall_samples():
    """--stalls: the instructions with the most warp-state samples, kept in the report's
    order, their shares of all samples and the samples by opcode; the all-samples column
    is read where ncu gives the not-issued one beside it."""
    from bench.experiments.ncu_sass_table import stall_column, stall_lines

    columns = ["Address", "Source", "Warp Stall Sampling (Not-issued Samples)", "Warp Stall Sampling (All Samples)"]
    assert stall_column(columns) == "Warp Stall Sampling (All Samples)"
    assert stall_column(["Source", "Warp Stall Sampling"]) == "Warp Stall Sampling"
    assert stall_column(["Source", "Other"]) is None
    samples = [("HGMMA.64x64x16.F32 R24, R72, gdesc[UR16], R24 ;", "10"),
               ("WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "1,200"),
               ("@!P1 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R0+URZ], RZ ;", "0"),
               ("LDS R19, [R17+0x2000] ;", "300"),
               ("HFMA2 R4, R5, R6, R7 ;", "490")]  # fmt: skip
    rows = [{"Address": f"{16 * i:04x}", "Source": src, columns[2]: "0", columns[3]: n}
            for i, (src, n) in enumerate(samples)]  # fmt: skip
    column, total, kept, by_op = stall_lines(rows, 3)
    assert column == columns[3] and total == 2000
    assert [a for a, _, _ in kept] == ["0010", "0030", "0040"]
    assert kept[0][2] == 1200 and kept[0][1].startswith("WARPGROUP.DEPBAR")
    assert by_op["WARPGROUP"] == 1200 and by_op["HGMMA"] == 10 and by_op["SYNCS"] == 0
    assert stall_lines([{"Source": "x"}], 3)[0] is None


def test_ncu_sass_table_finds_the_header_after_the_kernel_name():
    """ncu 2025's source page starts with a "Kernel Name" line, the name, and a blank line
    before the header (the thirty-fifth session's first run read the name as the header):
    the rows start at the first quoted line naming "Source"."""
    from bench.experiments.ncu_sass_table import source_rows

    text = ('"Kernel Name"\n"gemm_sm90_quant_x"\n\n"Address","Source","Warp Stall Sampling (All Samples)"\n'
            '"0x10","HGMMA.64x64x16.F32 R24, R56, gdesc[UR16], R24","131"\n"0x20","LDS R18, [R17]","2"\n')
    rows = source_rows(text)
    assert [r["Source"] for r in rows] == ["HGMMA.64x64x16.F32 R24, R56, gdesc[UR16], R24", "LDS R18, [R17]"]
    assert rows[0]["Warp Stall Sampling (All Samples)"] == "131"
    # Notes before a header that starts the text directly are skipped as before.
    assert source_rows('==PROF== note\n"Address","Source"\n"0x10","EXIT"\n') == [{"Address": "0x10", "Source": "EXIT"}]


def test_sm90_quant_knobs_plans_and_variants():
    """bench/experiments/sm90_quant_knobs.py: the plan is the cost model's among the default
    set's register-A SM90 quantized kernels (64x64 in turn on a small layer at 64 tokens),
    and a variant's settings go to the tile, the split count or the header's defines; a
    variant whose tile breaks the family's rules is None."""
    from bench.experiments.sm90_quant_knobs import plan_for, sm90_quant_kernels, variant_of
    from tests.sm90_quant_kernel import QuantKernel

    kernels = sm90_quant_kernels(4, "f16")
    assert kernels and all(k.spec.mainloop.value == "sm90_quant" and k.spec.d_type.value == "f16" for k in kernels)
    # A small layer at 64 tokens: since the fifty-fourth session the 64-row tile taking a
    # pair of K tiles a stage in turn, whole since the fifty-fifth (its shares crossing
    # tiles priced higher: the H200 timed it 15.0 us whole, 16.4 split two ways); a large
    # one at 1024 tokens: 256x128 whole.
    kernel, splits = plan_for(kernels, 64, 6144, 4096, 4, "f16")
    assert kernel == QuantKernel("f16", 4, "f16", 64, 64, 8, k_split=2, cta_k=128) and splits == 1
    kernel, splits = plan_for(kernels, 1024, 28672, 4096, 4, "f16")
    assert (kernel.tokens, kernel.rows, kernel.k_split, kernel.cta_k, splits) == (256, 128, 1, 64, 1)
    base = QuantKernel("f16", 4, "f16", 64, 128, 8)
    kernel, s = variant_of(("blocks=2", "splits=2", "GEMM_SM90Q_WGMMA_DEPTH=0"), base, 3)
    assert (kernel.blocks, kernel.stages, kernel.defines, s) == (2, 8, ("GEMM_SM90Q_WGMMA_DEPTH=0",), 2)
    assert variant_of(("GEMM_SM90Q_LEAVE_OUT=3",), base, 3) == (QuantKernel("f16", 4, "f16", 64, 128, 8,
                                                                           defines=("GEMM_SM90Q_LEAVE_OUT=3",)), 3)
    assert variant_of(("stages=9",), base, 3)[0] is None  # past the ring's 8
    kernel, _ = variant_of(("header=old.cuh", "GEMM_SM90Q_WGMMA_DEPTH=2"), base, 3)
    assert (kernel.header, kernel.defines) == ("old.cuh", ("GEMM_SM90Q_WGMMA_DEPTH=2",))
    assert variant_of(("blocks=2",), QuantKernel("f16", 4, "f16", 128, 128, 6), 1)[0] is None  # 128 tokens
    # A pair of K tiles a stage: on the tiles in turn, and on one warpgroup per 64 rows up
    # to 128 tokens (each takes both halves); not on 256 tokens.
    turns = QuantKernel("f16", 4, "f16", 64, 64, 8, k_split=2)
    assert variant_of(("cta_k=128",), turns, 2)[0].spec.cta == (64, 64, 128)
    assert variant_of(("cta_k=128",), base, 2)[0].spec.cta == (64, 128, 128)
    assert variant_of(("cta_k=128",), QuantKernel("f16", 4, "f16", 256, 128, 2), 2)[0] is None


def test_sm90_quant_launch_parses_tiles_and_rejects_bad_ones():
    """bench/experiments/sm90_quant_launch.py (one launch for a profiler): tiles as
    sm90_quant_tiles.py writes them, and a clear error for a malformed one before any
    GPU work."""
    import argparse

    from bench.experiments.sm90_quant_launch import parse_tile

    assert parse_tile("64x128s8") == (64, 128, 8, 1, 1, 64, ())
    assert parse_tile("64x256s8b2") == (64, 256, 8, 2, 1, 64, ())
    assert parse_tile("64x64s8k2") == (64, 64, 8, 1, 2, 64, ())
    pair = parse_tile("64x64x128s8k2")
    assert pair == (64, 64, 8, 1, 2, 128, ()) and pair.label == "64x64x128s8k2"
    assert pair.kernel("bf16", 8).spec.cta == (64, 64, 128) and pair.kernel().spec.warps == (1, 4, 2)
    assert parse_tile("64x256s8b2").label == "64x256s8b2"
    # Knobs of the header ride on the tile, in its label and its kernel's defines.
    knobs = parse_tile("64x256x128s4@GEMM_SM90Q_WGMMA_DEPTH=1,GEMM_SM90Q_SK_SKEW=0")
    assert knobs[:6] == (64, 256, 4, 1, 1, 128) and knobs.defines == ("GEMM_SM90Q_WGMMA_DEPTH=1", "GEMM_SM90Q_SK_SKEW=0")
    assert knobs.label == "64x256x128s4@GEMM_SM90Q_WGMMA_DEPTH=1,GEMM_SM90Q_SK_SKEW=0"
    assert parse_tile(knobs.label) == knobs
    assert knobs.kernel(defines=("GEMM_SM90Q_LEAVE_OUT=1",)).defines == knobs.defines + ("GEMM_SM90Q_LEAVE_OUT=1",)
    for bad in ("64x128", "64x128s8z2", "64x64s8k2b2", "x128s8", "64x64x128", "", "64x128s8@", "64x128s8@X=1",
                "64x128s8@GEMM_A=1,"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"TOKENSxROWS\[xK\]sSTAGES"):
            parse_tile(bad)


def test_the_read_order_kernels_compile_and_read_a_plans_geometry():
    """bench/experiments/read_order.py: its tile-order reads compile for sm_90 without
    spills, a tuned plan's text gives its geometry, and every candidate form covers the
    packed rows exactly."""
    from bench.experiments import read_order
    from gemm_runtime.compiler import compile_cubin

    result = compile_cubin(read_order.source(), name="read_order", arch=90, include_dirs=[], cache_dir=None)
    assert result.cubin and result.spill_stores == result.spill_loads == 0, result.log
    plan = read_order.plan_form("sm80 16x128x256 w1x4x2 s3 (1, z0)", 4)
    assert plan == read_order.Form(16, 1024, 1, 1)
    assert read_order.plan_form("sm90_quant 64x128x64 w1x8x1 s8 (3, z0)", 4) is None
    rows, row_bytes = 28672 // 8, 4096 * 4  # llama3-8b gate_up, 4-bit
    forms = read_order.candidate_forms(rows, row_bytes, plan, 132)
    assert forms[:3] == [read_order.Form(16, 1024, 1, d) for d in read_order.DEPTHS]
    assert len(forms) > 6 and len(set(forms)) == len(forms)
    for form in forms:
        assert form.fits(rows, row_bytes)
        assert form.rows_per_cta * form.chunk == form.per_thread() * 16 * read_order.THREADS
    assert not read_order.Form(16, 1024, 3, 1).fits(rows, row_bytes)  # 16 KB rows do not cut three ways


def test_the_unpack_chunks_cover_n_in_packed_rows():
    """sm80_unpack_chunks.column_chunks: chunks of whole packed rows (8 columns) whose
    unpacked rows fit the size asked, the last one narrower, covering N once."""
    from bench.experiments.sm80_unpack_chunks import column_chunks

    # 16 MiB of 4096 16-bit values a row: 2048 rows
    assert column_chunks(6144, 4096, 16) == [(0, 2048), (2048, 2048), (4096, 2048)]
    assert column_chunks(4096, 4096, 24) == [(0, 3072), (3072, 1024)]
    chunks = column_chunks(28672 + 24, 14336, 8)
    assert sum(nc for _, nc in chunks) == 28672 + 24 and all(n0 % 8 == 0 for n0, _ in chunks)
    assert all(nc * 14336 * 2 <= 8 << 20 for _, nc in chunks)
    assert column_chunks(64, 1 << 20, 1)[0] == (0, 8)  # at least a packed row
    with pytest.raises(ValueError, match="chunk size 0 MiB"):
        column_chunks(4096, 4096, 0)
