"""Tensor-parallel sharding of linear layers' weights (docs/PARALLEL.md): a column-
parallel layer keeps rows [n0, n1) of W [N, K] (its share of the outputs), a row-parallel
one columns [k0, k1) (its share of the inputs, whose partial products the ranks then sum).

Quantized weights shard in their unpacked form (quant.QuantizedWeight: AWQ, GPTQ and
compressed-tensors checkpoints all import to it), before packing for the kernels: along
N the codes, scales and zeros split by rows of N; along K the codes split by columns and
the groups with them, so a K shard must start and end on group boundaries. Act-order
(GPTQ g_idx) weights shard along N as they are; along K only where every group's rows lie
inside one shard, which GPTQ's activation order scatters in practice: such a layer is
refused with the group that straddles (load a desc_act=False checkpoint, or keep the
layer unsharded).

Every split is even: a dimension that the world size does not divide is refused, naming
the layer's argument, the size and the world size."""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.quant import QuantizedWeight

Dim = Literal["n", "k"]


def _check_rank(rank: object, world: object) -> tuple[int, int]:
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise GemmArgumentError("world_size", world, "a positive integer")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world:
        raise GemmArgumentError("rank", rank, f"an integer in 0..{world - 1} (world size {world})")
    return rank, world


def shard_range(size: int, rank: int, world: int, *, argument: str, unit: int = 1, unit_name: str = "") -> range:
    """Rank ``rank``'s even share of ``size`` indices, in whole ``unit``s (a quantization
    group along K). GemmArgumentError naming ``argument`` where ``world`` does not divide
    ``size`` or a share would cut a unit."""
    rank, world = _check_rank(rank, world)
    if size % world:
        raise GemmArgumentError(argument, f"{size} split {world} ways",
                                f"a size the world size divides ({size} = {size // world} x {world} + {size % world})")  # fmt: skip
    share = size // world
    if share % unit:
        raise GemmArgumentError(
            argument,
            f"{size} split {world} ways: shares of {share}, {share / unit:g} {unit_name or 'units'} of {unit}",
            f"shares of whole {unit_name or 'units'} of {unit} (world sizes up to 16 that give them: "
            f"{_fitting_worlds(size, unit)})",
        )
    return range(rank * share, (rank + 1) * share)


def _fitting_worlds(size: int, unit: int) -> str:
    """World sizes up to 16 whose even shares of ``size`` are whole units."""
    worlds = [w for w in range(1, 17) if size % w == 0 and (size // w) % unit == 0]
    return ", ".join(map(str, worlds)) if worlds else "none up to 16"


def shard_weight(weight: torch.Tensor, dim: Dim, rank: int, world: int, *, argument: str = "weight") -> torch.Tensor:
    """Rows (``dim`` "n", column-parallel) or columns ("k", row-parallel) of a dense
    W [N, K] for ``rank``, contiguous."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise GemmArgumentError(argument, getattr(weight, "shape", type(weight).__name__), "a 2-D (N, K) tensor")
    if dim == "n":
        rows = shard_range(weight.shape[0], rank, world, argument=f"{argument} N")
        return weight[rows.start : rows.stop].contiguous()
    if dim == "k":
        cols = shard_range(weight.shape[1], rank, world, argument=f"{argument} K")
        return weight[:, cols.start : cols.stop].contiguous()
    raise GemmArgumentError("dim", dim, "'n' (column-parallel) or 'k' (row-parallel)")


def shard_bias(bias: torch.Tensor | None, dim: Dim, rank: int, world: int) -> torch.Tensor | None:
    """A column-parallel layer's share of the bias; a row-parallel layer keeps it whole
    (it is added once, after the ranks' partial products are summed)."""
    _check_rank(rank, world)
    if dim not in ("n", "k"):
        raise GemmArgumentError("dim", dim, "'n' (column-parallel) or 'k' (row-parallel)")
    if bias is None:
        return bias
    if not isinstance(bias, torch.Tensor) or bias.dim() != 1:
        raise GemmArgumentError("bias", getattr(bias, "shape", type(bias).__name__), "a 1-D (N,) tensor or None")
    if dim == "k":
        return bias
    rows = shard_range(bias.shape[0], rank, world, argument="bias N")
    return bias[rows.start : rows.stop].contiguous()


def shard_gate_up(gate: torch.Tensor, up: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A gated MLP's gate and up weights [F, K], each split along F: the rank's gate rows
    pair with its up rows, so the gated epilogue needs nothing from the other ranks."""
    return (shard_weight(gate, "n", rank, world, argument="gate"), shard_weight(up, "n", rank, world, argument="up"))


def shard_quantized(qw: QuantizedWeight, dim: Dim, rank: int, world: int, *, argument: str = "weight") -> QuantizedWeight:
    """``rank``'s share of a quantized weight (see the module docstring for the rules)."""
    if not isinstance(qw, QuantizedWeight):
        raise GemmArgumentError(argument, type(qw).__name__, "a gemm_runtime.quant.QuantizedWeight")
    n, k = qw.shape
    if dim == "n":
        rows = shard_range(n, rank, world, argument=f"{argument} N")
        s = slice(rows.start, rows.stop)
        return dataclasses.replace(qw, q=qw.q[s].contiguous(), scales=qw.scales[:, s].contiguous(),
                                   zeros=qw.zeros[:, s].contiguous())  # fmt: skip
    if dim != "k":
        raise GemmArgumentError("dim", dim, "'n' (column-parallel) or 'k' (row-parallel)")
    if qw.g_idx is not None:
        return _shard_act_order(qw, rank, world, argument)
    if qw.group_size >= k:  # per-channel: one group, which every shard keeps whole
        cols = shard_range(k, rank, world, argument=f"{argument} K")
        return dataclasses.replace(qw, q=qw.q[:, cols.start : cols.stop].contiguous(), group_size=len(cols))
    cols = shard_range(k, rank, world, argument=f"{argument} K", unit=qw.group_size, unit_name="groups")
    groups = slice(cols.start // qw.group_size, cols.stop // qw.group_size)
    return dataclasses.replace(qw, q=qw.q[:, cols.start : cols.stop].contiguous(),
                               scales=qw.scales[groups].contiguous(), zeros=qw.zeros[groups].contiguous())  # fmt: skip


def _shard_act_order(qw: QuantizedWeight, rank: int, world: int, argument: str) -> QuantizedWeight:
    """A K shard of an act-order weight: its rows keep their groups (renumbered among the
    groups the shard holds), which must each lie wholly inside it."""
    k = qw.shape[1]
    cols = shard_range(k, rank, world, argument=f"{argument} K")
    g_idx = qw.g_idx.long()
    mine = g_idx[cols.start : cols.stop]
    counts = torch.bincount(g_idx, minlength=qw.num_groups)
    held = torch.bincount(mine, minlength=qw.num_groups)
    split = ((held > 0) & (held < counts)).nonzero().flatten()
    if split.numel():
        g = int(split[0])
        raise GemmArgumentError(
            f"{argument} g_idx",
            f"act-order groups across K shards (group {g}: {int(held[g])} of its {int(counts[g])} rows in rank "
            f"{rank}'s columns {cols.start}..{cols.stop - 1}; {split.numel()} groups so)",
            "groups that each lie inside one shard, for a row-parallel split (a desc_act=False checkpoint, "
            "or this layer kept whole or split along N)",
        )
    groups = (held > 0).nonzero().flatten()
    local = torch.full((qw.num_groups,), -1, dtype=torch.long, device=g_idx.device)
    local[groups] = torch.arange(groups.numel(), device=g_idx.device)
    return dataclasses.replace(
        qw, q=qw.q[:, cols.start : cols.stop].contiguous(), scales=qw.scales[groups].contiguous(),
        zeros=qw.zeros[groups].contiguous(), g_idx=local[mine].to(torch.int32),
    )  # fmt: skip


def with_original_order(qw: QuantizedWeight, perm: torch.Tensor | None) -> QuantizedWeight:
    """A reordered act-order weight (QuantizedWeight.reordered: columns sorted by group,
    x permuted by ``perm`` at run time) back in the original K order with its g_idx, so it
    shards along K by the original features (what a row-parallel input shard holds)."""
    if perm is None:
        return qw
    k = qw.shape[1]
    if not isinstance(perm, torch.Tensor) or tuple(perm.shape) != (k,):
        raise GemmArgumentError("perm", getattr(perm, "shape", type(perm).__name__),
                                f"None or a ({k},) permutation of K (a QuantLinear's perm)")  # fmt: skip
    perm = perm.long()
    q = torch.empty_like(qw.q)
    q[:, perm] = qw.q
    g_idx = torch.empty(k, dtype=torch.int32, device=qw.q.device)
    g_idx[perm] = (torch.arange(k, device=qw.q.device) // qw.group_size).to(torch.int32)
    return dataclasses.replace(qw, q=q, g_idx=g_idx)


def shard_packed(packed, dim: Dim, rank: int, world: int, *, perm: torch.Tensor | None = None,
                 argument: str = "weight") -> tuple[object, torch.Tensor | None]:  # fmt: skip
    """``rank``'s share of a weight packed for the kernels (packed_weight.PackedWeight, a
    QuantLinear's) and its input permutation, repacked: (PackedWeight, perm or None)."""
    from gemm_runtime.packed_weight import PackedWeight, pack_for_gemm

    if not isinstance(packed, PackedWeight):
        raise GemmArgumentError(argument, type(packed).__name__, "a gemm_runtime.packed_weight.PackedWeight "
                                "(shard_quantized takes a QuantizedWeight)")  # fmt: skip
    qw = shard_quantized(with_original_order(packed.unpack(), perm), dim, rank, world, argument=argument)
    new_perm = None
    if qw.g_idx is not None:
        qw, new_perm = qw.reordered()
    return pack_for_gemm(qw), new_perm
