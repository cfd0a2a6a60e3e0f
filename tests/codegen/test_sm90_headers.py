"""The SM90 headers compile with NVRTC for sm_90a, without spills, and emit the
instructions they wrap; plain sm_90 rejects them (wgmma and setmaxnreg are sm_90a
features). CPU only: nothing here runs a kernel (tests/gpu/test_sm90_smoke.py does)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from tests.sm90_smoke import SmokeKernel, nvrtc_compile, nvrtc_ptx, report  # noqa: E402
from tests.sm90_smoke_quant import QuantSmokeKernel  # noqa: E402

# Every wrapper of ptx_sm90.cuh, one entry per wgmma flavour so that no entry holds more
# than one accumulator array (the 128 registers of m64n256 alone are most of a budget).
_WRAPPERS = r"""
#include "gemm/sm90/ptx_sm90.cuh"

using namespace gemm;

template <int N, class Kind, bool RegA>
__device__ __forceinline__ void mma_body(float* out, const u32* a_src, int flag) {
  __shared__ alignas(1024) unsigned char tile[2 * 256 * 128];
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  const u64 da = smem_desc_kmajor_sw128(smem_addr(tile));
  const u64 db = smem_desc_kmajor_sw128(smem_addr(tile + 256 * 128));
  wgmma_fence();
  if constexpr (RegA) {
    const u32 a[4] = {a_src[0], a_src[1], a_src[2], a_src[3]};
    wgmma_rs<N, Kind>(d, a, db, flag != 0);
  } else {
    wgmma_ss<N, Kind>(d, da, db, flag != 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(d);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * (N / 2) + i] = d[i];
}

#define ENTRY(NAME, N, KIND, REGA) \
  extern "C" __global__ void __launch_bounds__(128, 1) NAME(float* out, const u32* a, int flag) { \
    mma_body<N, KIND, REGA>(out, a, flag); \
  }
ENTRY(ss_f16_64, 64, MmaF16, false)
ENTRY(ss_f16_128, 128, MmaF16, false)
ENTRY(ss_f16_256, 256, MmaF16, false)
ENTRY(ss_bf16_64, 64, MmaBF16, false)
ENTRY(ss_bf16_128, 128, MmaBF16, false)
ENTRY(ss_bf16_256, 256, MmaBF16, false)
ENTRY(rs_f16_64, 64, MmaF16, true)
ENTRY(rs_f16_128, 128, MmaF16, true)
ENTRY(rs_bf16_64, 64, MmaBF16, true)
ENTRY(rs_bf16_128, 128, MmaBF16, true)

extern "C" __global__ void __launch_bounds__(256, 1)
blocks(const __grid_constant__ CUtensorMap map, int* out, int c0, int c1) {
  __shared__ alignas(1024) unsigned char tile[16384];
  __shared__ u64 bar;
  const u32 b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    mbar_init(b, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    setmaxnreg_dec<40>();
    if (threadIdx.x < 32 && elect_one()) {
      prefetch_tensormap(&map);
      mbar_arrive_expect_tx(b, 2 * 16384);
      tma_load_2d(smem_addr(tile), &map, b, c0, c1);
      tma_load_2d_multicast(smem_addr(tile), &map, b, c0, c1, 0x3);
    }
  } else {
    setmaxnreg_inc<232>();
    mbar_wait(b, 0);
    tile[threadIdx.x] = 1;
    fence_proxy_async_smem();
    out[threadIdx.x] = tile[threadIdx.x + 1] + static_cast<int>(dynamic_smem_size());
  }
  __syncthreads();
  if (threadIdx.x == 0) mbar_inval(b);
  if (threadIdx.x == 1) mbar_arrive(b);
}
"""

_SMOKE = [SmokeKernel(d, o) for d in ("f16", "bf16") for o in ("f16", "bf16", "f32")] + [
    SmokeKernel("f16", "f32", stages=2),
    SmokeKernel("bf16", "bf16", stages=3),
]


def _entry_ptx(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start : end if end >= 0 else len(ptx)]


@pytest.fixture(scope="module")
def wrappers_ptx() -> str:
    ok, log, ptx = nvrtc_ptx(_WRAPPERS, "sm90_wrappers")
    assert ok, log
    return ptx


@pytest.mark.parametrize(
    "entry, instruction, n",
    [
        (f"{form}_{t}_{n}", f"m64n{n}k16.f32.{t}.{t}", n)
        for form, ns in (("ss", (64, 128, 256)), ("rs", (64, 128)))
        for t in ("f16", "bf16")
        for n in ns
    ],
)
def test_wgmma_wrappers_emit_the_shape_and_distinct_accumulators(
    wrappers_ptx: str, entry: str, instruction: str, n: int
) -> None:
    body = _entry_ptx(wrappers_ptx, entry)
    lines = [ln for ln in body.splitlines() if "wgmma.mma_async" in ln]
    assert len(lines) == 1 and instruction in lines[0], lines
    # The accumulator list: N/2 fp32 registers, each once (a repeated placeholder in the
    # hand-written operand lists would show up here as a duplicate).
    acc = re.search(r"\{([^}]*)\}", lines[0].split(instruction, 1)[1]).group(1)
    regs = [r.strip() for r in acc.split(",")]
    assert len(regs) == n // 2 and len(set(regs)) == n // 2 and all(r.startswith("%f") for r in regs)
    tail = lines[0].rsplit("}", 1)[1]
    if entry.startswith("rs"):
        a_regs = re.search(r"\{([^}]*)\}", lines[0].split("}", 1)[1]).group(1).split(",")
        assert len(a_regs) == 4 and all(r.strip().startswith("%r") for r in a_regs)
        assert tail.strip().endswith("p, 1, 1, 0;"), tail  # desc-b, scale-d, scales, trans-b
    else:
        assert re.match(r"\s*,\s*%rd\d+,\s*%rd\d+,\s*p, 1, 1, 0, 0;", tail), tail


def test_blocks_emit_their_instructions(wrappers_ptx: str) -> None:
    body = _entry_ptx(wrappers_ptx, "blocks")
    for instruction in (
        "mbarrier.init.shared::cta.b64",
        "fence.mbarrier_init.release.cluster",
        "mbarrier.arrive.expect_tx.shared::cta.b64",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "mbarrier.arrive.shared::cta.b64",
        "mbarrier.inval.shared::cta.b64",
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [",
        "complete_tx::bytes.multicast::cluster",
        "prefetch.tensormap",
        "fence.proxy.async.shared::cta",
        "setmaxnreg.dec.sync.aligned.u32 40",
        "setmaxnreg.inc.sync.aligned.u32 232",
        "elect.sync",
        "%dynamic_smem_size",
    ):
        assert instruction in body, instruction
    # The tensor map operand is the parameter's generic address, not a copy of it.
    assert "cvta.param.u64" in body


@pytest.mark.parametrize("kernel", _SMOKE, ids=lambda k: k.name)
def test_smoke_kernel_compiles_for_sm90a_without_spills(kernel: SmokeKernel) -> None:
    ok, log, cubin = nvrtc_compile(kernel.source(), kernel.name)
    assert ok, log
    assert cubin
    rep = report(log, kernel.name)
    assert rep["registers"] > 0, log  # the ptxas report was found
    assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0 and rep["stack_frame"] == 0, log
    assert "spill" not in log.replace("0 bytes spill", ""), log
    # 384 threads at one CTA per SM: the cap at entry that setmaxnreg needs.
    assert rep["registers"] <= 168, log
    assert "C7508" not in log and "setmaxnreg ignored" not in log, log  # setmaxnreg honoured
    # ptxas serializes wgmma (waits after each one) when it cannot prove the pipelining
    # safe, and says so; the ring's one-group-in-flight overlap would then be gone.
    assert "serialized" not in log, log


def test_plain_sm90_rejects_wgmma_and_setmaxnreg() -> None:
    """Why the kernels are built for sm_90a: the arch-specific features (wgmma,
    setmaxnreg) are not part of sm_90, so such a cubin cannot be built, and an sm_90a
    cubin runs on compute capability 9.0 only."""
    kernel = SmokeKernel("f16", "f32")
    ok, log, _ = nvrtc_compile(kernel.source(), kernel.name, arch="sm_90")
    assert not ok
    assert "wgmma" in log and "not supported on .target 'sm_90'" in log, log


_QUANT_SMOKE = [QuantSmokeKernel(d, bits, o) for d in ("f16", "bf16") for bits in (4, 8) for o in (d, "f32")]


@pytest.mark.parametrize("kernel", _QUANT_SMOKE, ids=lambda k: k.name)
def test_quantized_smoke_kernel_compiles_for_sm90a_without_spills(kernel: QuantSmokeKernel) -> None:
    """The register-A path (smoke_quant.cuh: D^T = W . X^T, W dequantized in registers)
    builds for every activation type, weight width and output."""
    ok, log, cubin = nvrtc_compile(kernel.source(), kernel.name)
    assert ok and cubin, log
    rep = report(log, kernel.name)
    assert rep["registers"] > 0 and rep["registers"] <= 168, log
    assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0 and rep["stack_frame"] == 0, log
    assert "C7508" not in log and "setmaxnreg ignored" not in log, log

