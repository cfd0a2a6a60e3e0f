"""templates/include/gemm/warp_mma_quant.cuh, compiled on the CPU (NVRTC, no GPU)."""

from __future__ import annotations

import pytest

from tests.templates.test_mainloop_sm80 import _ptx

pytest.importorskip("cuda.bindings.nvrtc")

ROW_SUM_MMA = "mma.sync.aligned.m16n8k8"


@pytest.mark.parametrize("a_type", ["f16", "bf16"])
def test_the_row_sums_knob_moves_the_m_up_to_8_row_sums_off_the_tensor_cores(a_type: str) -> None:
    """GEMM_SM80_ROW_SUMS_ALU (an experiment knob, 0 in every build): the deferred zero
    term's row sums of A at M <= 8 are taken on the ALUs instead of by one m16n8k8 MMA a
    k16 step, the only m16n8k8 MMAs of a direct-B decode kernel. The 9-16-row loop keeps
    its m16n8k16 row sums either way."""
    parts = (f"gemm_sm80_{a_type}_w4_sm80_", f"_d{a_type}_16x16x1024_w1x1x8_s3_nk_")
    default = _ptx(parts)
    alu = _ptx(parts, "#define GEMM_SM80_ROW_SUMS_ALU 1\n")
    assert default.count(ROW_SUM_MMA) > 0 and alu.count(ROW_SUM_MMA) == 0
    assert alu.count("mma.sync.aligned.m16n8k16") == default.count("mma.sync.aligned.m16n8k16")
