"""Whole-weight plans: a quantized weight unpacked into a dense buffer of the activations'
type (gemm_runtime/unpack.py, every weight dequantized once), then a dense kernel on
that buffer. What they are for is prefill on the mma.sync families: there the quantized
kernels dequantize every weight once per CTA row of tiles beside their MMAs (1.7-1.9x
the fp16 kernel's time at M >= 1024 on the H200), while the unpack costs about 2.5 bytes
of memory traffic per weight, little beside the dense GEMM's 2 M FLOP per weight once M
is large (docs/QUANT.md).

The rules live here, so that feasibility (feasibility.launch_error), ranking (the
Dispatcher) and launching (Gemm) give one answer:

* a whole-weight plan serves a quantized, ungrouped problem whose buffer fits
  ``settings().unpack_max_mib``; its kernel must serve the problem's dense key;
* it is ranked only from ``MIN_M`` rows (below, unpacking alone costs more than a
  quantized kernel's whole call), priced as the dense plan plus the unpack, and among
  the ``KERNELS`` dense kernels the cost model ranks best (each candidate kernel costs
  the tuner a measurement);
* the buffer is a temporary of the launch's stream (torch's caching allocator keeps it
  for the next call), rows padded to 8 elements.
"""

from __future__ import annotations

from gemm_runtime.context import Problem, ProblemKey
from gemm_runtime.cost_model import DeviceModel
from gemm_runtime.settings import settings
from gemm_runtime.unpack import row_pitch

MIN_M = 512
KERNELS = 4
# The unpack's share of DeviceModel.dram_bytes_per_s (H200: 3.5-3.6 TB/s against a copy's
# 4.2, bench.experiments.sm80_unpack_then_dense), and its launch.
_BANDWIDTH_SHARE = 0.85
_LAUNCH_SECONDS = 3e-6


def buffer_bytes(key: ProblemKey) -> int:
    return key.n * row_pitch(key.k) * (key.a_type.bits // 8)


def unpack_error(key: ProblemKey) -> str | None:
    """Why no whole-weight plan can serve ``key``, or None."""
    if key.quant == "none":
        return f"the weight is dense ({key.b_type.value}), nothing to unpack"
    if key.experts:
        return f"a grouped problem ({key.experts} experts) unpacks no whole weight"
    limit = settings().unpack_max_mib << 20
    if buffer_bytes(key) > limit:
        return (f"its buffer of {key.n} x {row_pitch(key.k)} {key.a_type.value} ({buffer_bytes(key) >> 20} MiB) "
                f"exceeds GEMM_UNPACK_MAX_MIB ({settings().unpack_max_mib} MiB)")  # fmt: skip
    return None


def dense_key(key: ProblemKey) -> ProblemKey:
    """The problem the dense kernel of a whole-weight plan serves: B of A's type, N x K.
    Its alignment stays the key's (A's and B's; the buffer's rows are 8-aligned)."""
    return key._replace(b_type=key.a_type, quant="none")


def dense_problem(problem: Problem, buffer: int, ld: int) -> Problem:
    """The dense kernel's problem of a whole-weight plan: B the buffer at ``buffer`` (rows
    ``ld`` elements apart), no scales."""
    return problem._replace(key=dense_key(problem.key), b=buffer, ldb=ld, v=0, ldv=0, groups=0, group_shift=0)


def ranked(key: ProblemKey) -> bool:
    """Whether the dispatcher offers whole-weight plans for ``key``."""
    return key.m >= MIN_M and unpack_error(key) is None


def unpack_seconds(key: ProblemKey, device: DeviceModel) -> float:
    """The unpack's time: the packed weight, its scales and zeros read, the buffer written."""
    bits = key.b_type.bits
    groups = -(-key.k // key.group_size)
    moved = key.n * key.k * bits // 8 + 2 * groups * key.n * 2 + buffer_bytes(key)
    return _LAUNCH_SECONDS + moved / (device.dram_bytes_per_s * _BANDWIDTH_SHARE)
