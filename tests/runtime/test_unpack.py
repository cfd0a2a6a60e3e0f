"""gemm_runtime.unpack on the CPU: its kernels compile for every arch from sm_75 without
spills (a Gemm compiles them for its GPU when it is made; no bf16 before sm_80), one
entry per (activation type, bits), and arguments it cannot serve are refused by name
(its results: tests/gpu/test_unpack.py)."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.build import INCLUDE_DIR
from gemm_runtime.compiler import compile_cubin
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.unpack import ENTRIES, SOURCE, entries, source, unpack_weight


@pytest.mark.parametrize("arch", [75, 80, 86, 90])
def test_the_kernels_compile_without_spills(arch):
    result = compile_cubin(source(arch), name="gemm_unpack", arch=arch, include_dirs=[INCLUDE_DIR], cache_dir=None)
    assert result.spill_stores == result.spill_loads == 0, result.log
    for entry in entries(arch).values():
        assert entry.encode() in result.cubin


def test_every_activation_type_and_width_has_an_entry():
    assert set(ENTRIES) == {(d, b) for d in (torch.float16, torch.bfloat16) for b in (4, 8)}
    assert len(set(ENTRIES.values())) == 4
    assert source(80) == SOURCE and entries(80) == entries(90) == ENTRIES
    # Turing: fp16 only (bf16x2 needs sm_80; the source with them fails to compile there).
    # Volta: none (no packed weights there), so a Gemm compiles nothing for them.
    assert entries(75) == {k: v for k, v in ENTRIES.items() if k[0] is torch.float16}
    assert "BFloat16" not in source(75) and entries(70) == {}


def test_refuses_what_is_not_a_packed_weight_on_a_gpu():
    with pytest.raises(GemmArgumentError, match="^packed: got Tensor.*PackedWeight"):
        unpack_weight(torch.zeros(8, 32))
    packed = pack_for_gemm(quantize(torch.randn(16, 64, dtype=torch.float16), bits=4, group_size=32))
    with pytest.raises(GemmArgumentError, match="^packed: got on cpu.*CUDA"):
        unpack_weight(packed)


def test_the_launch_sizes_agree_with_the_kernel():
    """unpack.py sizes the grid by the warps' share per trip: the header's constants."""
    import re

    from gemm_runtime import unpack

    text = (INCLUDE_DIR / "gemm" / "unpack.cuh").read_text()
    assert int(re.search(r"kUnpackChunk = (\d+);", text)[1]) == unpack._CHUNK
    assert int(re.search(r"kUnpackWarps = (\d+);", text)[1]) == unpack.THREADS // 32
