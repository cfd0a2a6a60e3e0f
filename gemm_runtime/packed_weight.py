"""The quantized kernels' weight layout: a QuantizedWeight packed so that what a thread
loads from shared memory is exactly what its MMA B fragments need.

The m16n8k16 B fragment gives lane (g, t) of a warp column g of an 8-column tile and
the K pairs (2t, 2t+1) and (2t+8, 2t+9) of a k16 step. The packing groups the weight
in blocks of 8 columns x 32 K (two k16 steps) and stores each block as the 32 lanes'
words in lane order (lane = 4g + t):

* 4-bit: one 32-bit word per lane. Nibble i (bits 4i .. 4i+3) holds
  k = 2t + 8 (i & 3) + (i >> 2), so the pairs of nibbles (0, 4), (1, 5), (2, 6),
  (3, 7) are the fragment registers (step 0, reg 0), (0, 1), (1, 0), (1, 1), and
  one AND/OR per register turns them into 16-bit floats (templates/include/gemm/dequant.cuh).
* 8-bit: two words per lane, word s for k16 step s, bytes (2t, 2t+1, 2t+8, 2t+9).

A row of ``b`` holds one 8-column tile's blocks along K; K is padded with zero codes
to a multiple of 32 and N with zero columns to a multiple of 8. Pure torch, on the
weight's device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.quant import QuantizedWeight

BLOCK_N, BLOCK_K = 8, 32
GROUP_SHIFT_ALL_K = 30  # one group over all of K: every realistic K index maps to group 0


def lane_k_offsets(bits: int) -> list[list[int]]:
    """``[t][e]``: the K offset inside a block of element e of the words of a lane with
    t = lane % 4 (elements in bit order: nibbles for 4-bit, bytes for 8-bit)."""
    if bits == 4:
        return [[2 * t + 8 * (e & 3) + (e >> 2) for e in range(8)] for t in range(4)]
    if bits == 8:
        return [[16 * (e >> 2) + 2 * t + (e & 1) + 8 * ((e >> 1) & 1) for e in range(8)] for t in range(4)]
    raise GemmArgumentError("bits", bits, "4 or 8")


@dataclass(frozen=True, eq=False)
class PackedWeight:
    """A QuantizedWeight in the layout the quantized kernels read.

    ``b``: uint8 [ceil(N / 8), Kp * bits], the fragment-ordered blocks (module docstring),
    Kp = K rounded up to 32. ``v``: [2 * groups, Np] in the activations' dtype, the
    scales then the zero points, N padded to Np (a multiple of 8) so every row starts on
    a 16-byte boundary. ``group_shift``: the group of K index k is k >> group_shift."""

    b: torch.Tensor
    v: torch.Tensor
    bits: int
    group_size: int
    k: int
    n: int
    groups: int
    group_shift: int
    symmetric: bool

    @property
    def dtype(self) -> torch.dtype:
        return self.v.dtype

    @functools.cached_property
    def signature(self) -> tuple:
        """What a matmul's validation reads of this weight beyond its pointers' values
        (gemm_runtime.fast_path; computed once: the tensors are fixed)."""
        from gemm_runtime.fast_path import packed_signature

        return packed_signature(self.b, self.v, (self.bits, self.group_size, self.n, self.k, self.symmetric))

    @property
    def padded_k(self) -> int:
        return self.b.shape[1] // self.bits

    def unpack(self) -> QuantizedWeight:
        """The QuantizedWeight this was packed from (for tests and debugging)."""
        n8, kp = self.b.shape[0], self.padded_k
        blocks = kp // BLOCK_K
        raw = self.b.view(n8, blocks, BLOCK_N, 4, -1)  # [tile, block, g, t, bytes of the lane]
        if self.bits == 4:
            elems = torch.stack([raw & 0xF, raw >> 4], dim=-1).flatten(-2)  # nibble 2j, 2j+1 of byte j
        else:
            elems = raw
        q = torch.empty(n8, blocks, BLOCK_N, BLOCK_K, dtype=torch.uint8, device=self.b.device)
        for t, ks in enumerate(lane_k_offsets(self.bits)):
            q[..., ks] = elems[:, :, :, t, :]
        q = q.permute(0, 2, 1, 3).reshape(n8 * BLOCK_N, kp)[: self.n, : self.k]
        scales = self.v[: self.groups, : self.n]
        zeros = self.v[self.groups :, : self.n]
        return QuantizedWeight(q.contiguous(), scales.contiguous(), zeros.contiguous(), self.bits,
                               self.group_size, self.symmetric)  # fmt: skip


def group_shift(group_size: int, groups: int) -> int:
    """The shift that maps a K index to its group, for power-of-two group sizes."""
    if groups == 1:
        return GROUP_SHIFT_ALL_K
    if group_size & (group_size - 1) == 0:
        return group_size.bit_length() - 1
    raise GemmArgumentError("qw.group_size", group_size, "a power of two, or one group over all of K")


def pack_for_gemm(qw: QuantizedWeight) -> PackedWeight:
    """The kernel layout of ``qw``. Act-order weights (with g_idx) must be reordered
    first (``qw.reordered()``), permuting the activations' columns the same way."""
    if not isinstance(qw, QuantizedWeight):
        raise GemmArgumentError("qw", type(qw).__name__, "a gemm_runtime.quant.QuantizedWeight")
    if qw.g_idx is not None:
        raise GemmArgumentError("qw.g_idx", "an act-order g_idx", "None: call qw.reordered() and permute A by its perm")
    n, k = qw.shape
    groups = qw.num_groups
    shift = group_shift(qw.group_size, groups)
    n8, kp = -(-n // BLOCK_N), -(-k // BLOCK_K) * BLOCK_K
    q = F.pad(qw.q, (0, kp - k, 0, n8 * BLOCK_N - n))
    blocks = q.view(n8, BLOCK_N, kp // BLOCK_K, BLOCK_K).permute(0, 2, 1, 3)  # [tile, block, g, k]
    index = torch.tensor(lane_k_offsets(qw.bits), dtype=torch.long, device=q.device)
    elems = blocks[..., index]  # [tile, block, g, t, element]
    if qw.bits == 4:
        elems = elems[..., 0::2] | (elems[..., 1::2] << 4)  # nibble 2j low, 2j+1 high in byte j
    b = elems.reshape(n8, kp * qw.bits).contiguous()
    v = torch.cat([qw.scales, qw.zeros.to(qw.scales.dtype)], dim=0)
    v = F.pad(v, (0, n8 * BLOCK_N - n)).contiguous()
    return PackedWeight(b, v, qw.bits, qw.group_size, k, n, groups, shift, qw.symmetric)
