"""The hot path of ``Gemm.grouped_matmul``, as gemm_runtime.fast_path is ``matmul``'s:
once a grouped call of a given signature (the shapes, strides, dtypes, devices and
alignments of every operand, the epilogue, the policy or forced kernel, the stream) has
been validated and dispatched, the next call with the same signature reuses its
parameter block and writes only the new pointers and scalars (and the tensor maps of
the operands that moved).

Why: the validating path costs 120-230 us of host time a call on the H200's host
(bench.host_time, twenty-third session), more than a decode step's grouped kernel takes
on the GPU, so an eager MoE layer was bound by its host. The routing's values are
never read here either way (experts.check_routing); a call that asks for them to be
checked takes the validating path.

A signature holds everything the validation, the dispatch decision and the block's
fields other than pointers depend on, so a replay is what the validating path would
launch; plans are dropped when the dispatch cache changes (its version)."""

from __future__ import annotations

import ctypes
import struct
from typing import NamedTuple

import torch

from codegen.params import PARAM_OFFSETS
from gemm_runtime.fast_path import KeptLaunch, tensor_part
from gemm_runtime.grouped import kernel_routing, sorted_rows

# The block's fields a replay writes, in this order.
_FIELDS = ("A", "B", "C", "D", "U", "V", "bias", "offsets", "gather")
_MAPPED = (0, 1, 3, 5)  # A, B, D and V: the operands with tensor maps
_POINTER = struct.Struct("=Q")
_SCALARS = struct.Struct("=ff")
assert PARAM_OFFSETS["beta"] == PARAM_OFFSETS["alpha"] + 4


def _part(t: object) -> tuple | None:
    return None if t is None else tensor_part(t)


def grouped_signature(x, w_part: tuple, offsets, index, row_scale, bias, c, out, extra: tuple) -> tuple:
    """Everything about a grouped call that validation and dispatch look at, except the
    pointer values themselves (only their alignment), from the arguments as given.
    AttributeError where an argument is not a tensor (the validating path then says
    what it is). ``w_part``: tensor_part of stacked weights, or PackedExperts.signature."""
    return ("grouped", tensor_part(x), w_part, tensor_part(offsets), _part(index), _part(row_scale), _part(bias),
            _part(c), _part(out), extra)  # fmt: skip


class GroupedFastPlan(NamedTuple):
    kernel: KeptLaunch  # the block holds the values of _FIELDS, then alpha and beta
    stream_handle: int
    offset: int  # where GemmParams starts in the block
    maps: object  # grouped.GroupedMaps, or None
    gathered: bool  # A's rows gathered into sorted order before the launch (a TMA kernel with an index)
    out_shape: tuple[int, int]
    version: int
    keep: tuple  # what the parameters point at that must stay alive (workspace)

    @classmethod
    def build(cls, function, grid, threads: int, smem: int, stream: int, block: bytes, offset: int, maps,
              gathered: bool, out_shape: tuple[int, int], version: int, keep: tuple) -> "GroupedFastPlan":  # fmt: skip
        """``function``: the kernel's LoadedFunction; ``stream``: a raw handle; ``block``:
        the validated launch's parameter block, GemmParams at ``offset``."""
        kernel = KeptLaunch.build(function, grid, threads, smem, stream, block)
        return cls(kernel, stream, offset, maps, gathered, out_shape, version, keep)

    def replay(self, x, b: int, v: int, offsets, index, row_scale, bias, c, out, alpha: float,
               beta: float) -> torch.Tensor:  # fmt: skip
        """``Gemm.grouped_matmul`` for arguments of this plan's signature (the weights by
        their blocks' and scales' pointers)."""
        offsets, index, row_scale = kernel_routing(offsets, index, row_scale, self.stream_handle)
        if out is None:
            out = x.new_empty(self.out_shape)
        a, gather = x, index
        if self.gathered:
            a, gather = sorted_rows(x, index, self.stream_handle), None
        values = (a.data_ptr(), b, 0 if c is None else c.data_ptr(), out.data_ptr(),
                  0 if row_scale is None else row_scale.data_ptr(), v, 0 if bias is None else bias.data_ptr(),
                  offsets.data_ptr(), 0 if gather is None else gather.data_ptr(), alpha,
                  beta if c is not None else 0.0)  # fmt: skip
        self.kernel(values, GroupedFastPlan._write, self)
        return out

    def _write(self, buf, last: tuple | None, values: tuple) -> None:
        at = self.offset
        if self.maps is not None and (last is None or any(last[i] != values[i] for i in _MAPPED)):
            # NOTE: a descriptor holds its operand's address: one for the last call's A,
            # B, V or D would read or write the old tensor.
            ctypes.memmove(buf, self.maps(values[0], values[1], values[5], values[3]), at)
        for name, value in zip(_FIELDS, values):
            _POINTER.pack_into(buf, at + PARAM_OFFSETS[name], value)
        _SCALARS.pack_into(buf, at + PARAM_OFFSETS["alpha"], values[9], values[10])
