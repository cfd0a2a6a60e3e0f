"""Weight-only quantized weights (W4A16 / W8A16) on the weight side: the canonical form
the kernels' packer starts from, round-to-nearest quantization, the generic int32
packers, and import of AWQ, GPTQ and compressed-tensors checkpoints. Pure torch: everything runs on the
weight's device (CPU or CUDA) and nothing here moves tensors between devices.

    qw = quantize(linear.weight, bits=4, group_size=128)        # [N, K] -> QuantizedWeight
    qw = from_awq(qweight, qzeros, scales, group_size=128)      # AutoAWQ "GEMM" tensors
    qw = from_gptq(qweight, qzeros, scales, g_idx, bits=4, group_size=128)
    qw = from_compressed_tensors(weight_packed, weight_scale, weight_shape, group_size=128)
    w = qw.dequantize()                                         # [N, K] in scales' dtype

The layouts and the sources they were checked against are in docs/QUANT.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gemm_runtime.errors import GemmArgumentError

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)  # besides per-channel, given as -1 or K
SCALE_DTYPES = (torch.float16, torch.bfloat16)
PER_CHANNEL = -1

# AutoAWQ packs 8 4-bit values per int32 along N; the nibble at bit 4*i of word j holds
# column 8*j + AWQ_ORDER[i]. Derived from AutoAWQ awq/modules/linear/gemm.py
# (WQLinear_GEMM.from_linear: `order_map = [0, 2, 4, 6, 1, 3, 5, 7]`, value
# `intweight[:, col * pack_num + order_map[i]]` shifted by `i * w_bit`) and cross-checked
# with awq/utils/packing_utils.py (unpack_awq + reverse_awq_order, AWQ_REVERSE_ORDER =
# [0, 4, 1, 5, 2, 6, 3, 7], the inverse permutation).
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
# Column c of a block of 8 sits in nibble AWQ_NIBBLE_OF_COLUMN[c] (AutoAWQ's AWQ_REVERSE_ORDER).
AWQ_NIBBLE_OF_COLUMN = tuple(AWQ_ORDER.index(c) for c in range(8))


# --- small checks shared by every entry point -------------------------------------------------


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor dtype={t.dtype} shape={tuple(t.shape)} device={t.device}"
    return repr(t)


def _check_int(argument: str, value: object, accepted: tuple[int, ...], extra: str = "") -> int:
    # bool is an int subclass; True must not pass for bits=1.
    if isinstance(value, bool) or not isinstance(value, int) or value not in accepted:
        raise GemmArgumentError(argument, repr(value), " or ".join(map(str, accepted)) + extra)
    return value


def _check_bits(bits: object) -> int:
    return _check_int("bits", bits, BITS)


def _resolve_group_size(group_size: object, k: int, argument: str = "group_size") -> int:
    """-1 or K mean per-channel (one group spanning K); returns the group size in rows."""
    accepted = f"one of {GROUP_SIZES}, or {PER_CHANNEL} or K={k} for per-channel"
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise GemmArgumentError(argument, repr(group_size), accepted)
    if group_size in (PER_CHANNEL, k):
        return k
    if group_size not in GROUP_SIZES:
        raise GemmArgumentError(argument, group_size, accepted)
    return group_size


def _check_tensor(argument: str, t: object, dtypes: tuple[torch.dtype, ...], ndim: int) -> torch.Tensor:
    names = ", ".join(str(d) for d in dtypes)
    if not isinstance(t, torch.Tensor) or t.dtype not in dtypes or t.dim() != ndim:
        raise GemmArgumentError(argument, _describe(t), f"a {ndim}-D tensor of dtype {names}")
    if t.numel() == 0:
        raise GemmArgumentError(argument, _describe(t), "a non-empty tensor")
    return t


def _check_shape(argument: str, t: torch.Tensor, shape: tuple[int, ...], why: str) -> None:
    if tuple(t.shape) != shape:
        raise GemmArgumentError(argument, f"shape {tuple(t.shape)}", f"shape {shape} ({why})")


def _num_groups(k: int, group_size: int) -> int:
    return math.ceil(k / group_size)


# --- the canonical form -------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no truth value to compare by
class QuantizedWeight:
    """A linear layer's weight W [N, K] (torch.nn.Linear layout) quantized along K.

    q        uint8 [N, K], one unpacked integer per element, 0 .. 2**bits - 1
    scales   float16 / bfloat16 [G, N]
    zeros    [G, N], scales' dtype: the zero point in the integer domain (integral; up to
             2**bits because GPTQ's classic +1 convention can produce it). Symmetric
             quantization has zeros == 2**(bits-1) everywhere.
    g_idx    None: row k is in group k // group_size; else int32 [K], the group of each row
             (GPTQ act-order), and then group_size only matters to reordered().

    W[n, k] = (q[n, k] - zeros[g(k), n]) * scales[g(k), n]; G = ceil(K / group_size) when
    g_idx is None. group_size -1 is stored as K (per-channel).
    """

    q: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    bits: int
    group_size: int
    symmetric: bool
    g_idx: torch.Tensor | None = None

    def __post_init__(self) -> None:
        _check_bits(self.bits)
        q = _check_tensor("q", self.q, (torch.uint8,), 2)
        n, k = q.shape
        # Frozen: normalising -1 to K needs object.__setattr__; stored sizes are always rows.
        object.__setattr__(self, "group_size", _resolve_group_size(self.group_size, k))
        if not isinstance(self.symmetric, bool):
            raise GemmArgumentError("symmetric", repr(self.symmetric), "True or False")
        self._check_params(n, k)
        self._check_g_idx(k)
        self._check_values()

    # The checks read tensor values (one device sync each): construction is load-time work.

    def _check_params(self, n: int, k: int) -> None:
        scales = _check_tensor("scales", self.scales, SCALE_DTYPES, 2)
        if scales.shape[1] != n:
            raise GemmArgumentError("scales", f"shape {tuple(scales.shape)}", f"[G, N={n}] (N of q)")
        if self.g_idx is None:
            _check_shape("scales", scales, (_num_groups(k, self.group_size), n),
                         f"G = ceil(K={k} / group_size={self.group_size})")
        if not isinstance(self.zeros, torch.Tensor) or self.zeros.dtype != scales.dtype:
            raise GemmArgumentError("zeros", _describe(self.zeros), f"a tensor of scales' dtype {scales.dtype}")
        _check_shape("zeros", self.zeros, tuple(scales.shape), "the shape of scales")
        for name, t in (("scales", scales), ("zeros", self.zeros), ("g_idx", self.g_idx)):
            # A g_idx that is no tensor is named by _check_g_idx.
            if isinstance(t, torch.Tensor) and t.device != self.q.device:
                raise GemmArgumentError(name, f"device {t.device}", f"q's device {self.q.device}")

    def _check_g_idx(self, k: int) -> None:
        if self.g_idx is None:
            return
        g_idx = _check_tensor("g_idx", self.g_idx, (torch.int32,), 1)
        _check_shape("g_idx", g_idx, (k,), "one group index per row of K")
        groups = self.scales.shape[0]
        lo, hi = int(g_idx.min()), int(g_idx.max())
        if lo < 0 or hi >= groups:
            raise GemmArgumentError("g_idx", f"values in [{lo}, {hi}]", f"values in [0, {groups - 1}] (G = {groups})")

    def _check_values(self) -> None:
        top = (1 << self.bits) - 1
        if self.bits < 8 and int(self.q.max()) > top:
            raise GemmArgumentError("q", f"max value {int(self.q.max())}", f"values 0..{top} for bits={self.bits}")
        if not bool(torch.isfinite(self.scales).all()):
            raise GemmArgumentError("scales", "non-finite values", "finite values")
        z = self.zeros.float()
        if not bool(torch.isfinite(z).all()) or bool((z != z.round()).any()):
            # No supported format needs a fractional zero; relax this when one does.
            raise GemmArgumentError("zeros", "non-integral or non-finite values", "integral values")
        lo, hi = float(z.min()), float(z.max())
        if lo < 0 or hi > top + 1:
            raise GemmArgumentError("zeros", f"values in [{lo:g}, {hi:g}]", f"values in [0, {top + 1}]")
        if self.symmetric and not bool((z == (1 << (self.bits - 1))).all()):
            raise GemmArgumentError(
                "zeros", f"values in [{lo:g}, {hi:g}] with symmetric=True", f"all {1 << (self.bits - 1)} when symmetric"
            )

    # --- views and conversions -------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K) of the dequantized weight."""
        return tuple(self.q.shape)

    @property
    def num_groups(self) -> int:
        return self.scales.shape[0]

    def group_index(self) -> torch.Tensor:
        """int64 [K]: the group of each row of K (g_idx, or k // group_size)."""
        if self.g_idx is not None:
            return self.g_idx.long()
        k = self.q.shape[1]
        return torch.arange(k, device=self.q.device) // self.group_size

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """W [N, K] = (q - z) * s, computed in fp32 and rounded once at the end to
        ``dtype`` (default: the scales' dtype; ``torch.float32`` keeps it exact)."""
        if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
            # NOTE: "float32" was read by Tensor.to as a device; an integer dtype truncated the weights.
            raise GemmArgumentError("dtype", repr(dtype), "None (the scales' dtype) or a floating-point torch.dtype, "
                                    "e.g. torch.float32")  # fmt: skip
        g = self.group_index()
        zeros = self.zeros.float().index_select(0, g).t()  # [N, K]
        scales = self.scales.float().index_select(0, g).t()
        return ((self.q.float() - zeros) * scales).to(dtype or self.scales.dtype)

    def reordered(self) -> tuple[QuantizedWeight, torch.Tensor]:
        """An equivalent weight whose rows of K are sorted by group, so that groups are
        contiguous and g_idx is None (what a kernel without g_idx support needs), and the
        permutation perm (int64 [K]) with A[:, perm] @ W'.T == A @ W.T.

        Raises GemmArgumentError when the groups are not group_size rows each (the last may
        be shorter): such a weight has no g_idx-free form."""
        k = self.q.shape[1]
        if self.g_idx is None:
            return self, torch.arange(k, device=self.q.device)
        perm = torch.argsort(self.g_idx, stable=True)  # stable: keeps K order inside a group
        sorted_groups = self.g_idx[perm].long()
        expected = torch.arange(k, device=self.q.device) // self.group_size
        if sorted_groups.shape != expected.shape or not bool((sorted_groups == expected).all()):
            counts = torch.bincount(self.g_idx.long(), minlength=self.num_groups).tolist()
            raise GemmArgumentError(
                "g_idx", f"rows per group {counts[:8]}{' ...' if len(counts) > 8 else ''}",
                f"group_size={self.group_size} rows per group (the last may be shorter) for a g_idx-free form",
            )
        q = self.q.index_select(1, perm).contiguous()
        return dataclasses.replace(self, q=q, g_idx=None), perm


# --- round-to-nearest quantization ----------------------------------------------------------------


def _check_weight(weight: object) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point() or weight.dim() != 2:
        raise GemmArgumentError("weight", _describe(weight), "a 2-D floating-point tensor [N, K]")
    if weight.numel() == 0:
        raise GemmArgumentError("weight", _describe(weight), "a non-empty tensor")
    # NOTE: torch has no isfinite for some 8-bit floats (float8_e4m3fn): those are checked
    # in fp32, as _grouped reads every weight anyway.
    if not bool(torch.isfinite(weight if weight.element_size() > 1 else weight.float()).all()):
        raise GemmArgumentError("weight", "non-finite values", "finite values")
    return weight


def _scale_dtype(scale_dtype: object, weight_dtype: torch.dtype) -> torch.dtype:
    if scale_dtype is None:
        return weight_dtype if weight_dtype in SCALE_DTYPES else torch.float16
    if scale_dtype not in SCALE_DTYPES:
        raise GemmArgumentError("scale_dtype", repr(scale_dtype), "torch.float16, torch.bfloat16 or None")
    return scale_dtype


def _grouped(weight: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N, K] fp32 -> [N, G, group_size], the short last group padded with zeros. Zero
    padding cannot move a group's range: the range always includes 0 (see quantize)."""
    n, k = weight.shape
    groups = _num_groups(k, group_size)
    padded = F.pad(weight.float(), (0, groups * group_size - k))
    return padded.reshape(n, groups, group_size)


def _round_up(scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The smallest value of dtype >= scale (fp32, >= 0). Rounding the stored scale up keeps
    every weight within the representable range, so no element is clamped further than
    scale / 2. Incrementing the bit pattern of a non-negative float gives the next one up."""
    stored = scale.to(dtype)
    up = (stored.view(torch.int16) + 1).view(dtype)
    return torch.where(stored.float() < scale, up, stored)


def _asymmetric(groups: torch.Tensor, bits: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # GPTQ's convention (AutoGPTQ quantizer.py, Quantizer.find_params): the range is widened to include 0,
    # so the zero point lands in 0 .. 2**bits - 1 without clamping, even for one-signed groups.
    top = (1 << bits) - 1
    lo = groups.amin(dim=-1).clamp(max=0)
    hi = groups.amax(dim=-1).clamp(min=0)
    scale = (hi - lo) / top
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero group
    scale = _round_up(scale, dtype)
    zero = (-lo / scale.float()).round().clamp(0, top)
    return scale, zero


def _symmetric(groups: torch.Tensor, bits: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # scale = max|w| / (2**(bits-1) - 1): q - zero spans -(2**(bits-1) - 1) .. 2**(bits-1) - 1,
    # symmetric around the fixed zero 2**(bits-1); code 0 is unused so nothing ever clamps.
    half = 1 << (bits - 1)
    scale = groups.abs().amax(dim=-1) / (half - 1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    scale = _round_up(scale, dtype)
    return scale, torch.full_like(scale, half, dtype=torch.float32)


def quantize(
    weight: torch.Tensor,
    *,
    bits: int = 4,
    group_size: int = 128,
    symmetric: bool = False,
    scale_dtype: torch.dtype | None = None,
) -> QuantizedWeight:
    """Round-to-nearest min/max quantization of weight [N, K] in groups of group_size rows
    of K (-1 or K: per-channel; a K that is not a multiple leaves the last group shorter).

    asymmetric: lo = min(min w, 0), hi = max(max w, 0), scale = (hi - lo) / (2**bits - 1),
                zero = round(-lo / scale)
    symmetric:  scale = max|w| / (2**(bits-1) - 1), zero = 2**(bits-1)
    q = clamp(round(w / scale) + zero, 0, 2**bits - 1). The scale is rounded up to
    scale_dtype (default: the weight's dtype when fp16/bf16, else fp16) and q computed with
    that stored scale, so |dequantize - w| <= scale / 2 per element (before dequantize's
    final rounding). An all-zero group gets scale 1 (q == zero, exact)."""
    bits = _check_bits(bits)
    # Detached: an nn.Linear's weight requires grad, and its scales and zeros carried the
    # autograd graph (held, and warned about at every float() of the checks).
    weight = _check_weight(weight).detach()
    if not isinstance(symmetric, bool):
        raise GemmArgumentError("symmetric", repr(symmetric), "True or False")
    n, k = weight.shape
    group_size = _resolve_group_size(group_size, k)
    dtype = _scale_dtype(scale_dtype, weight.dtype)
    groups = _grouped(weight, group_size)
    scale, zero = (_symmetric if symmetric else _asymmetric)(groups, bits, dtype)
    if not bool(torch.isfinite(scale).all()):
        raise GemmArgumentError(
            "weight", f"a group range needing scale {float(scale.float().max()):g}",
            f"values whose scales fit {dtype} (try scale_dtype=torch.bfloat16)",
        )
    q = (groups / scale.float().unsqueeze(-1)).round() + zero.unsqueeze(-1)
    q = q.clamp(0, (1 << bits) - 1).reshape(n, -1)[:, :k].to(torch.uint8)
    return QuantizedWeight(
        q=q.contiguous(),
        scales=scale.t().contiguous(),
        zeros=zero.t().to(dtype).contiguous(),
        bits=bits,
        group_size=group_size,
        symmetric=symmetric,
    )


# --- generic int32 packing (little-endian along the last dimension) -------------------------------


def _pack_last(values: torch.Tensor, bits: int) -> torch.Tensor:
    """[..., L] integers < 2**bits -> int32 [..., ceil(L / (32/bits))]: element l at bit
    (l % per) * bits of word l // per; the last word zero-padded."""
    per = 32 // bits
    length = values.shape[-1]
    words = -(-length // per)
    # int64 so that a value shifted into bit 31 does not overflow before the wrap below.
    padded = F.pad(values.to(torch.int64), (0, words * per - length))
    shifts = torch.arange(per, device=values.device, dtype=torch.int64) * bits
    packed = (padded.reshape(*values.shape[:-1], words, per) << shifts).sum(dim=-1)
    # Bit 31 set means a negative int32: wrap explicitly rather than rely on a narrowing cast.
    return torch.where(packed >= 1 << 31, packed - (1 << 32), packed).to(torch.int32)


def _unpack_last(words: torch.Tensor, bits: int, length: int) -> torch.Tensor:
    """The inverse of _pack_last: int32 [..., W] -> uint8 [..., length]."""
    per = 32 // bits
    shifts = torch.arange(per, device=words.device, dtype=torch.int64) * bits
    # >> sign-extends a word with bit 31 set; the mask drops the copied sign bits again.
    values = (words.to(torch.int64).unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return values.reshape(*words.shape[:-1], -1)[..., :length].to(torch.uint8)


def pack_int32(q: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 [N, K] -> int32 [N, ceil(K * bits / 32)], packed along K little-endian: element
    k at bit (k % (32/bits)) * bits of word k // (32/bits); K padded to a whole word with
    zeros. The generic form; the kernels' interleaved layout is built on top of it."""
    bits = _check_bits(bits)
    q = _check_tensor("q", q, (torch.uint8,), 2)
    top = (1 << bits) - 1
    if bits < 8 and int(q.max()) > top:
        raise GemmArgumentError("q", f"max value {int(q.max())}", f"values 0..{top} for bits={bits}")
    return _pack_last(q, bits)


def unpack_int32(packed: torch.Tensor, bits: int, k: int) -> torch.Tensor:
    """int32 [N, ceil(k * bits / 32)] -> uint8 [N, k]; the inverse of pack_int32."""
    bits = _check_bits(bits)
    packed = _check_tensor("packed", packed, (torch.int32,), 2)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise GemmArgumentError("k", repr(k), "an integer >= 1")
    words = -(-k // (32 // bits))
    _check_shape("packed", packed, (packed.shape[0], words), f"ceil(k={k} * bits={bits} / 32) words per row")
    return _unpack_last(packed, bits, k)


# --- checkpoint import ------------------------------------------------------------------------------


def _infer_symmetric(zeros: torch.Tensor, bits: int, symmetric: object) -> bool:
    """None: symmetric iff every zero is 2**(bits-1); True/False are taken as given (and
    True is then validated by QuantizedWeight)."""
    if symmetric is None:
        return bool((zeros.float() == (1 << (bits - 1))).all())
    if not isinstance(symmetric, bool):
        raise GemmArgumentError("symmetric", repr(symmetric), "True, False or None (infer from zeros)")
    return symmetric


def _awq_columns(n: int, device: torch.device) -> torch.Tensor:
    """Index into the nibble-ordered unpacking that puts column c of each block of 8 where it
    belongs: out[:, 8j + c] = unpacked[:, 8j + AWQ_NIBBLE_OF_COLUMN[c]]."""
    within = torch.tensor(AWQ_NIBBLE_OF_COLUMN, device=device, dtype=torch.int64)
    return (torch.arange(0, n, 8, device=device).unsqueeze(1) + within).reshape(-1)


def from_awq(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    *,
    group_size: int,
    bits: int = 4,
    symmetric: bool | None = None,
) -> QuantizedWeight:
    """AutoAWQ's "GEMM" layout -> QuantizedWeight (q transposed to [N, K]).

    qweight int32 [K, N/8]    8 4-bit values per word along N, in AWQ_ORDER
    qzeros  int32 [G, N/8]    the integer zero points, packed like qweight
    scales  fp16/bf16 [G, N]  W[n, k] = (q - zero) * scale (no offset on the zeros)
    G = ceil(K / group_size); group_size -1 means per-channel."""
    if _check_bits(bits) != 4:
        raise GemmArgumentError("bits", bits, "4 (AWQ's GEMM layout packs only 4-bit values)")
    qweight = _check_tensor("qweight", qweight, (torch.int32,), 2)
    qzeros = _check_tensor("qzeros", qzeros, (torch.int32,), 2)
    scales = _check_tensor("scales", scales, SCALE_DTYPES, 2)
    n = scales.shape[1]
    if n % 8:
        raise GemmArgumentError(
            "scales", f"shape {tuple(scales.shape)} (N={n})", "N a multiple of 8 (AWQ packs 8 columns per int32)"
        )
    k = qweight.shape[0]
    group_size = _resolve_group_size(group_size, k)
    groups = _num_groups(k, group_size)
    _check_shape("qweight", qweight, (k, n // 8), f"[K, N/8] with N={n} from scales")
    _check_shape("scales", scales, (groups, n), f"[G, N], G = ceil(K={k} / group_size={group_size})")
    _check_shape("qzeros", qzeros, (groups, n // 8), "[G, N/8]")
    columns = _awq_columns(n, qweight.device)
    q = _unpack_last(qweight, 4, n).index_select(1, columns).t().contiguous()
    zeros = _unpack_last(qzeros, 4, n).index_select(1, columns).to(scales.dtype)
    return QuantizedWeight(
        q=q, scales=scales, zeros=zeros, bits=4, group_size=group_size,
        symmetric=_infer_symmetric(zeros, 4, symmetric),
    )


def _act_order_g_idx(g_idx: object, k: int, group_size: int, groups: int) -> torch.Tensor | None:
    """int32 [K] or None; a g_idx that is just k // group_size (what checkpoints without
    act-order ship) carries nothing and becomes None."""
    if g_idx is None:
        return None
    g_idx = _check_tensor("g_idx", g_idx, (torch.int32, torch.int64), 1)
    _check_shape("g_idx", g_idx, (k,), "one group index per row of K")
    # Checked before the cast to int32, which would wrap an int64 index into another group.
    lo, hi = int(g_idx.min()), int(g_idx.max())
    if lo < 0 or hi >= groups:
        raise GemmArgumentError("g_idx", f"values in [{lo}, {hi}]", f"values in [0, {groups - 1}] (G = {groups})")
    trivial = torch.arange(k, device=g_idx.device) // group_size
    if bool((g_idx.long() == trivial).all()):
        return None
    return g_idx.to(torch.int32)


def from_gptq(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor | None = None,
    *,
    bits: int = 4,
    group_size: int = 128,
    zero_point_offset: int = 1,
    symmetric: bool | None = None,
) -> QuantizedWeight:
    """GPTQ's layout (AutoGPTQ / exllama / vLLM "gptq") -> QuantizedWeight.

    qweight int32 [K*bits/32, N]  packed along K: row k at bit (k % (32/bits)) * bits of word row k // (32/bits)
    qzeros  int32 [G, ceil(N*bits/32)]  packed along N the same way
    scales  fp16/bf16 [G, N], G = ceil(K / group_size)
    g_idx   int32 [K] or None: the group of each row of K (act-order / desc_act)

    zero = stored + zero_point_offset. 1 (default) is GPTQ's classic "gptq" checkpoint
    format, which stores zeros minus one; 0 is "gptq_v2" (GPTQModel), which stores them as
    they are. K is qweight.shape[0] * 32 / bits."""
    bits = _check_bits(bits)
    zero_point_offset = _check_int("zero_point_offset", zero_point_offset, (0, 1),
                                   " (1: classic gptq checkpoints, 0: gptq_v2)")
    per = 32 // bits
    qweight = _check_tensor("qweight", qweight, (torch.int32,), 2)
    qzeros = _check_tensor("qzeros", qzeros, (torch.int32,), 2)
    scales = _check_tensor("scales", scales, SCALE_DTYPES, 2)
    k, n = qweight.shape[0] * per, qweight.shape[1]
    group_size = _resolve_group_size(group_size, k)
    groups = _num_groups(k, group_size)
    _check_shape("scales", scales, (groups, n),
                 f"[G, N], G = ceil(K={k} / group_size={group_size}), N={n} from qweight")
    _check_shape("qzeros", qzeros, (groups, -(-n // per)), f"[G, ceil(N * bits / 32)] with N={n}")
    g_idx = _act_order_g_idx(g_idx, k, group_size, groups)
    q = _unpack_last(qweight.t(), bits, k).contiguous()  # packed along K: unpack the transpose
    zeros = (_unpack_last(qzeros, bits, n).to(torch.int32) + zero_point_offset).to(scales.dtype)
    return QuantizedWeight(
        q=q, scales=scales, zeros=zeros, bits=bits, group_size=group_size,
        symmetric=_infer_symmetric(zeros, bits, symmetric), g_idx=g_idx,
    )


def _weight_shape(weight_shape: object) -> tuple[int, int]:
    """compressed-tensors' weight_shape (a 2-element integer tensor) or a pair -> (N, K)."""
    accepted = "(N, K): a 2-element integer tensor or a pair of ints >= 1"
    if isinstance(weight_shape, torch.Tensor):
        if weight_shape.dtype.is_floating_point or weight_shape.is_complex() or weight_shape.numel() != 2:
            raise GemmArgumentError("weight_shape", _describe(weight_shape), accepted)
        weight_shape = weight_shape.flatten().tolist()
    if not isinstance(weight_shape, (tuple, list)) or len(weight_shape) != 2:
        raise GemmArgumentError("weight_shape", repr(weight_shape), accepted)
    n, k = weight_shape
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (n, k)):
        raise GemmArgumentError("weight_shape", repr(tuple(weight_shape)), accepted)
    return n, k


def from_compressed_tensors(
    weight_packed: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_shape: torch.Tensor | tuple[int, int],
    weight_zero_point: torch.Tensor | None = None,
    g_idx: torch.Tensor | None = None,
    *,
    bits: int = 4,
    group_size: int = 128,
) -> QuantizedWeight:
    """compressed-tensors' "pack-quantized" layout (llm-compressor W4A16 / W8A16) ->
    QuantizedWeight.

    weight_packed      int32 [N, ceil(K*bits/32)]  packed along K, little-endian: element
                       k at bit (k % (32/bits)) * bits of word k // (32/bits)
    weight_scale       fp16/bf16 [N, G]            note: N first, unlike AWQ and GPTQ
    weight_shape       (N, K): the packed width only gives K to within a word
    weight_zero_point  None (symmetric) or int32 [ceil(N*bits/32), G]: packed along N
                       (dim 0), the same little-endian way
    g_idx              None or int [K] (``weight_g_idx``, GPTQ act-order)

    Values are signed, -2**(bits-1) .. 2**(bits-1) - 1, and stored plus 2**(bits-1), both
    the weights and the zero points, so the stored codes are already the unsigned q and
    zero of W = (q - zero) * scale; no zero point means zero = 2**(bits-1).
    group_size -1 is the "channel" strategy (G = 1)."""
    bits = _check_bits(bits)
    per = 32 // bits
    packed = _check_tensor("weight_packed", weight_packed, (torch.int32,), 2)
    scale = _check_tensor("weight_scale", weight_scale, SCALE_DTYPES, 2)
    n, k = _weight_shape(weight_shape)
    group_size = _resolve_group_size(group_size, k)
    groups = _num_groups(k, group_size)
    _check_shape("weight_packed", packed, (n, -(-k // per)),
                 f"[N, ceil(K * bits / 32)] with (N, K)=({n}, {k}) from weight_shape")
    _check_shape("weight_scale", scale, (n, groups), f"[N, G], G = ceil(K={k} / group_size={group_size})")
    q = _unpack_last(packed, bits, k)
    scales = scale.t().contiguous()
    if weight_zero_point is None:
        zeros = torch.full_like(scales, 1 << (bits - 1))
    else:
        zero_point = _check_tensor("weight_zero_point", weight_zero_point, (torch.int32,), 2)
        _check_shape("weight_zero_point", zero_point, (-(-n // per), groups),
                     f"[ceil(N * bits / 32), G] with N={n} (packed along N)")
        zeros = _unpack_last(zero_point.t(), bits, n).to(scales.dtype)
    g_idx = _act_order_g_idx(g_idx, k, group_size, groups)
    return QuantizedWeight(
        q=q, scales=scales, zeros=zeros, bits=bits, group_size=group_size,
        symmetric=weight_zero_point is None, g_idx=g_idx,
    )
