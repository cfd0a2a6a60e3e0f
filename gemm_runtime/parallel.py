"""Tensor-parallel layers over torch.distributed (docs/PARALLEL.md): each rank holds its
shard (gemm_runtime.sharding) as one of this project's layers and runs it on its own
device's Gemm; the ranks communicate only through the process group (NCCL on GPUs, gloo
on CPUs), the way inference engines shard their linear layers.

    column-parallel  y_r = x @ W_r.T (+ b_r)          W_r: rows of W (outputs)
    row-parallel     y = sum_r x_r @ W_r.T (+ b)      W_r: columns of W (inputs), all_reduce
    gated MLP        down(silu(x @ gate_r.T) * (x @ up_r.T)): gate_up column-parallel, down
                     row-parallel, one all_reduce per MLP

A row-parallel layer adds its bias once, after the sum. Quantized layers quantize their
own shard (rows are quantized one by one along K, so a shard of the quantized whole and
the quantized shard are the same weight), or take a shard of an imported QuantizedWeight
(AWQ, GPTQ: sharding.shard_quantized, which refuses K shards that would cut a group)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.nn import GatedMLPProjection, Linear, QuantGatedMLPProjection, QuantLinear, _check_linear
from gemm_runtime.quant import QuantizedWeight, quantize
from gemm_runtime.sharding import shard_bias, shard_gate_up, shard_packed, shard_quantized, shard_weight

_QUANTIZE_KEYS = {"bits", "group_size", "symmetric"}


def rank_and_world(group=None) -> tuple[int, int]:
    """This process's rank in ``group`` (None: the default group) and the group's size;
    GemmArgumentError when torch.distributed has no process group."""
    if not dist.is_available() or not dist.is_initialized():
        raise GemmArgumentError("group", "no process group",
                                "torch.distributed.init_process_group(...) called first (torchrun sets it up)")  # fmt: skip
    return dist.get_rank(group), dist.get_world_size(group)


def _check_quantize(quantize_args: dict | None) -> dict | None:
    if quantize_args is None:
        return None
    if not isinstance(quantize_args, dict) or not set(quantize_args) <= _QUANTIZE_KEYS:
        raise GemmArgumentError("quantize", quantize_args, f"None or a dict with keys among {sorted(_QUANTIZE_KEYS)}")
    return quantize_args


def _check_quant_linear(layer: object) -> QuantLinear:
    """from_quant_linear's layer: a QuantLinear (a gated projection's shard became a plain
    QuantLinear, the un-gated product of twice the columns, silently; anything else failed
    inside with AttributeError)."""
    if not isinstance(layer, QuantLinear) or layer._epilogue != "none":
        raise GemmArgumentError("layer", type(layer).__name__, "a gemm_runtime.nn.QuantLinear (a gated MLP: "
                                "ParallelGatedMLP.from_mlp)")  # fmt: skip
    return layer


def _check_gather_output(gather_output: object) -> bool:
    if not isinstance(gather_output, bool):  # a truthy string ("False") would gather
        raise GemmArgumentError("gather_output", repr(gather_output), "True or False")
    return gather_output


def _check_row_bias(local: torch.nn.Module, bias: object) -> None:
    """A row-parallel layer's whole bias: added to every output row after the all_reduce,
    so anything but N values of the output's type would broadcast or promote silently."""
    if bias is None:
        return
    n = getattr(local, "out_features", None)  # Linear, QuantLinear: the layers from_* build
    typed = getattr(local, "weight", getattr(local, "scales_zeros", None))  # their output's type
    dtype = typed.dtype if isinstance(typed, torch.Tensor) else None
    if not isinstance(bias, torch.Tensor) or bias.dim() != 1 or (n is not None and bias.shape[0] != n):
        raise GemmArgumentError("bias", tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__,
                                f"None or a 1-D ({n if n is not None else 'N'},) tensor: one value per output of the "
                                f"layer")  # fmt: skip
    if dtype is not None and bias.dtype != dtype:
        raise GemmArgumentError("bias.dtype", bias.dtype, f"{dtype} (the layer's output type)")


def _local(weight: torch.Tensor, bias: torch.Tensor | None, quantize_args: dict | None, gemm) -> torch.nn.Module:
    """The rank's layer for a float shard: Linear, or QuantLinear of the quantized shard."""
    if quantize_args is None:
        return Linear(weight, bias, gemm)
    qw = quantize(weight, **quantize_args)
    return QuantLinear.from_quantized(qw, _output_bias(bias, qw.scales.dtype), gemm)


def _output_bias(bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A float Linear's bias in its quantized layer's output type (the scales': fp16 for an
    fp32 Linear), as QuantLinear.from_float takes it."""
    return None if bias is None else bias.to(dtype)


class ColumnParallelLinear(torch.nn.Module):
    """The rank's share of a linear layer's outputs: rows [n0, n1) of W. ``gather_output``
    concatenates the ranks' outputs (an all_gather); else each rank keeps its share, the
    input of a row-parallel layer."""

    def __init__(self, local: torch.nn.Module, *, group=None, gather_output: bool = False) -> None:
        super().__init__()
        self.local = local
        self.group = group
        self.gather_output = _check_gather_output(gather_output)
        self.rank, self.world_size = rank_and_world(group)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, group=None, gemm=None, quantize: dict | None = None,
                    gather_output: bool = False) -> "ColumnParallelLinear":  # fmt: skip
        """The rank's shard of a float torch.nn.Linear (quantized when ``quantize`` gives
        bits / group_size / symmetric)."""
        _check_linear("linear", linear)
        rank, world = rank_and_world(group)
        weight = shard_weight(linear.weight.detach(), "n", rank, world)
        bias = shard_bias(linear.bias.detach() if linear.bias is not None else None, "n", rank, world)
        return cls(_local(weight, bias, _check_quantize(quantize), gemm), group=group, gather_output=gather_output)

    @classmethod
    def from_quantized(cls, qw: QuantizedWeight, bias: torch.Tensor | None = None, *, group=None, gemm=None,
                       gather_output: bool = False) -> "ColumnParallelLinear":  # fmt: skip
        """The rank's shard of a whole quantized weight (e.g. imported from AWQ or GPTQ)."""
        rank, world = rank_and_world(group)
        local = QuantLinear.from_quantized(shard_quantized(qw, "n", rank, world), shard_bias(bias, "n", rank, world),
                                           gemm)  # fmt: skip
        return cls(local, group=group, gather_output=gather_output)

    @classmethod
    def from_quant_linear(cls, layer: QuantLinear, *, group=None, gemm=None,
                          gather_output: bool = False) -> "ColumnParallelLinear":  # fmt: skip
        """The rank's rows of a loaded QuantLinear (the project's packed weights)."""
        _check_quant_linear(layer)
        rank, world = rank_and_world(group)
        packed, perm = shard_packed(layer.packed, "n", rank, world, perm=layer.perm)
        local = QuantLinear(packed, shard_bias(layer.bias, "n", rank, world), perm, gemm)
        return cls(local, group=group, gather_output=gather_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.local(x)
        if not self.gather_output or self.world_size == 1:
            return y
        parts = [torch.empty_like(y) for _ in range(self.world_size)]
        dist.all_gather(parts, y.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)

    def extra_repr(self) -> str:
        return f"rank={self.rank}, world_size={self.world_size}, gather_output={self.gather_output}"


class RowParallelLinear(torch.nn.Module):
    """The rank's share of a linear layer's inputs: columns [k0, k1) of W, applied to the
    rank's share of x (a column-parallel layer's output); the ranks' partial products are
    summed by an all_reduce, then the whole bias is added once."""

    def __init__(self, local: torch.nn.Module, bias: torch.Tensor | None = None, *, group=None) -> None:
        super().__init__()
        _check_row_bias(local, bias)
        self.local = local  # without a bias: it would be summed world_size times
        self.register_buffer("bias", None if bias is None else bias.detach())
        self.group = group
        self.rank, self.world_size = rank_and_world(group)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, group=None, gemm=None,
                    quantize: dict | None = None) -> "RowParallelLinear":  # fmt: skip
        _check_linear("linear", linear)
        rank, world = rank_and_world(group)
        weight = shard_weight(linear.weight.detach(), "k", rank, world)
        local = _local(weight, None, _check_quantize(quantize), gemm)
        bias = linear.bias.detach() if linear.bias is not None else None
        if isinstance(local, QuantLinear):
            bias = _output_bias(bias, local.scales_zeros.dtype)
        return cls(local, bias, group=group)

    @classmethod
    def from_quantized(cls, qw: QuantizedWeight, bias: torch.Tensor | None = None, *, group=None,
                       gemm=None) -> "RowParallelLinear":  # fmt: skip
        """The rank's K shard of a whole quantized weight: whole groups per shard, and for
        act-order weights every group inside one shard (sharding.shard_quantized)."""
        rank, world = rank_and_world(group)
        return cls(QuantLinear.from_quantized(shard_quantized(qw, "k", rank, world), None, gemm), bias, group=group)

    @classmethod
    def from_quant_linear(cls, layer: QuantLinear, *, group=None, gemm=None) -> "RowParallelLinear":
        """The rank's columns of a loaded QuantLinear, by its original input features (an
        act-order layer is taken back to them first, and refused where a group straddles
        two shards)."""
        _check_quant_linear(layer)
        rank, world = rank_and_world(group)
        packed, perm = shard_packed(layer.packed, "k", rank, world, perm=layer.perm)
        return cls(QuantLinear(packed, None, perm, gemm), layer.bias, group=group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.local(x)
        if self.world_size > 1:
            dist.all_reduce(y, group=self.group)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"rank={self.rank}, world_size={self.world_size}"


class ParallelGatedMLP(torch.nn.Module):
    """``down(silu(gate(x)) * up(x))`` split the usual way: each rank computes its share of
    the intermediate features with the gated epilogue (gate_up column-parallel, nothing
    exchanged), then its share of down's inputs; one all_reduce sums the outputs."""

    def __init__(self, gate_up: torch.nn.Module, down: RowParallelLinear) -> None:
        super().__init__()
        self.gate_up = gate_up
        self.down = down

    @classmethod
    def from_mlp(cls, gate: torch.nn.Linear, up: torch.nn.Linear, down: torch.nn.Linear, *, group=None, gemm=None,
                 quantize: dict | None = None) -> "ParallelGatedMLP":  # fmt: skip
        """The rank's share of a gated MLP (bias-free gate and up, as in LLaMA-like
        models), quantized when ``quantize`` gives bits / group_size / symmetric."""
        for name, linear in (("gate", gate), ("up", up), ("down", down)):
            _check_linear(name, linear)
        if gate.bias is not None or up.bias is not None:
            raise GemmArgumentError("gate/up bias", "a bias", "bias-free gate and up projections")
        if down.in_features != gate.out_features:
            # NOTE: else built, and refused at the first call as an x.shape the caller never gave.
            raise GemmArgumentError("down.in_features", down.in_features,
                                    f"{gate.out_features} (gate's out_features: down reads the MLP's features)")  # fmt: skip
        rank, world = rank_and_world(group)
        g, u = shard_gate_up(gate.weight.detach(), up.weight.detach(), rank, world)
        quantize_args = _check_quantize(quantize)
        if quantize_args is None:
            gate_up = GatedMLPProjection.from_weights(g, u, gemm)
        else:
            gate_up = QuantGatedMLPProjection.from_gate_up(g, u, gemm=gemm, **quantize_args)
        return cls(gate_up, RowParallelLinear.from_linear(down, group=group, gemm=gemm, quantize=quantize_args))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.gate_up(x))
