"""templates/include/gemm/mainloop_sm80.cuh, compiled on the CPU (NVRTC, no GPU)."""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings.nvrtc")


def _ptx(name_parts: tuple[str, ...], defines: str = "") -> str:
    """The PTX of the default set's kernel whose name holds every part, as the registry
    renders it, with `defines` (preprocessor lines) before its source."""
    from codegen.config import default_config_paths, load_configs
    from codegen.render import render_kernel
    from tests.sm90_smoke import nvrtc_ptx

    (spec,) = {k.spec.name: k.spec for k in load_configs(default_config_paths())
               if all(p in k.spec.name for p in name_parts)}.values()  # fmt: skip
    ok, log, ptx = nvrtc_ptx(defines + render_kernel(spec, "tests/templates/test_mainloop_sm80.py"), spec.name, "sm_90")
    assert ok, log
    return ptx


COPY = "cp.async.cg.shared.global"


@pytest.mark.parametrize("tile", ["16x16x1024_w1x1x8_s3", "16x128x256_w1x4x2_s3"])
def test_the_decode_loop_for_m_up_to_8_copies_only_a_rows_0_to_7(tile: str) -> None:
    """The direct-B decode loop runs twice, once for M <= 8 (`upper` false). That copy
    issues only A's copies that can hold rows 0-7 (GEMM_SM80_LOWER_A_COPIES): the rows
    past M were predicated off anyway, but their copies and address arithmetic were
    still issued every K tile (docs/NOTES.md, forty-third session). With the knob off the
    kernel has more copy instructions; the dense tiles do not change."""
    parts = ("gemm_sm80_f16_w4_sm80_", f"_df16_{tile}_nk_")
    lower = _ptx(parts).count(COPY)
    every = _ptx(parts, "#define GEMM_SM80_LOWER_A_COPIES 0\n").count(COPY)
    assert 0 < lower < every, (lower, every)
    dense = ("gemm_sm80_f16_sm80_", "_df16_128x128x32_", "_nk_")
    assert _ptx(dense).count(COPY) == _ptx(dense, "#define GEMM_SM80_LOWER_A_COPIES 0\n").count(COPY)


def test_the_cta_trace_knob_stamps_every_phase_and_is_absent_by_default() -> None:
    """gemm/cta_trace.cuh (bench/experiments/decode_trace.py): with GEMM_CTA_TRACE 1 the
    kernel defines the module global the experiment reads (C linkage, its size from the
    header's constants) and stores a stamp at each of the header's points; by default the
    PTX holds neither the global nor a clock or global-timer read."""
    import re

    from bench.experiments import decode_trace

    parts = ("gemm_sm80_f16_w4_sm80_", "_df16_16x16x1024_w1x1x8_s3_nk_")
    plain, traced = _ptx(parts), _ptx(parts, "#define GEMM_CTA_TRACE 1\n")
    for marker in ("gemm_cta_trace", "%globaltimer", "%clock64", "%smid"):
        assert marker not in plain and marker in traced, marker
    size = re.search(r"\.global \.align \d+ \.b8 gemm_cta_trace\[(\d+)\]", traced)
    assert size and int(size.group(1)) == 8 * decode_trace.TRACE_CTAS * decode_trace.TRACE_POINTS, size
    assert traced.count("%clock64") >= 6 and traced.count("%globaltimer") >= 2
