"""templates/include/gemm/warp_mma_quant.cuh, compiled on the CPU (NVRTC, no GPU)."""

from __future__ import annotations

import pytest

from tests.templates.test_mainloop_sm80 import _ptx

pytest.importorskip("cuda.bindings.nvrtc")


@pytest.mark.parametrize("a_type", ["f16", "bf16"])
def test_the_m_up_to_8_row_sums_take_one_m16n8k16_per_k32_step(a_type: str) -> None:
    """The deferred zero term's row sums of A at M <= 8 take one m16n8k16 for both k16
    halves of a k32 step (two m16n8k8, one per half, measured slower on an H100), so a
    direct-B decode kernel has no m16n8k8 MMA left."""
    ptx = _ptx((f"gemm_sm80_{a_type}_w4_sm80_", f"_d{a_type}_16x16x1024_w1x1x8_s3_nk_"))
    assert "mma.sync.aligned.m16n8k8" not in ptx
    assert ptx.count("mma.sync.aligned.m16n8k16") > 0
