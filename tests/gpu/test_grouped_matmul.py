"""Gemm.grouped_matmul on the GPU (docs/MOE.md): every grouped kernel of the build, forced
and by default choice, against experts.grouped_reference, with A gathered through an
index (unsorted tokens, each routed to top-k experts), routing weights as row scales in
bf16 (converted by the runtime), per-expert bias, the gated SiLU, beta * C, outputs
poisoned with NaN; quantized experts (W4A16, W8A16) the same way against their
dequantized weights; and the errors of a forced kernel that cannot serve the launch."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime import DispatchPolicy, GemmArgumentError
from gemm_runtime.experts import check_routing, grouped_reference, pack_experts
from gemm_runtime.quant import quantize
from gemm_runtime.plan import LaunchSpec
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu
TOL = 1e-2


def _grouped(gemm, bits: int = 0):
    """The grouped kernels of the build for dense experts (``bits`` 0) or quantized ones."""
    return [k.name for k in gemm.kernels if k.spec.grouped and (k.spec.b_type.bits if k.spec.quantized else 0) == bits]


def _routing(tokens: int, experts: int, top_k: int, gen: torch.Generator):
    """Top-k of random logits: offsets (E + 1), the sorted rows' tokens, their weights."""
    logits = torch.randn(tokens, experts, device="cuda", generator=gen)
    weights, chosen = torch.topk(torch.softmax(logits, -1), top_k, dim=-1)
    order = torch.argsort(chosen.reshape(-1), stable=True)
    counts = torch.bincount(chosen.reshape(-1), minlength=experts)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).int()
    return offsets, (order // top_k).int(), weights.reshape(-1)[order]


@pytest.mark.parametrize("bits", [0, 4, 8], ids=["dense", "w4", "w8"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("tokens", [1, 37, 300])
def test_grouped_matmul_matches_the_reference(gemm, dtype, bits, tokens) -> None:
    """Dense experts, or quantized ones (``bits``) against their dequantized weights."""
    names = [n for n in _grouped(gemm, bits) if gemm.registry.get(n).spec.a_type.value == {torch.float16: "f16",
                                                                                            torch.bfloat16: "bf16"}[dtype]]
    assert names, "the default set has grouped kernels for both 16-bit types, dense and 4- and 8-bit"
    gen = torch.Generator(device="cuda").manual_seed(tokens + bits)
    # N / 2 = 136: the gated output keeps whole 16-byte rows; both N and N / 2 leave a tile
    # residue. K: six quantization groups of 32 and a partial one.
    experts, top_k, n, k = 8, 2, 272, 200
    x = torch.randn(tokens, k, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(experts, n, k, device="cuda", dtype=dtype, generator=gen) / k**0.5
    w_ref = w
    if bits:
        w = pack_experts([quantize(we, bits=bits, group_size=32) for we in w])
        w_ref = w.dequantize(torch.float32)
    bias = torch.randn(experts, n, device="cuda", dtype=dtype, generator=gen)
    offsets, index, scale = _routing(tokens, experts, top_k, gen)
    rows = tokens * top_k
    routing = check_routing(offsets, experts=experts, rows=rows, device=x.device, tokens=tokens, index=index,
                            row_scale=scale, check_values=True)  # fmt: skip
    failures = []
    for gated in (False, True):
        cols = n // 2 if gated else n
        c = torch.randn(rows, cols, device="cuda", dtype=dtype, generator=gen)
        ref = grouped_reference(x, w_ref, routing, bias=bias, alpha=0.5, beta=0.25, c=c, gated=gated)
        for name in [None, *names]:
            out = torch.full((rows, cols), float("nan"), device="cuda", dtype=dtype)
            gemm.grouped_matmul(x, w, offsets, index=index, row_scale=scale.to(dtype), bias=bias, gated=gated,
                                alpha=0.5, beta=0.25, c=c, out=out, kernel=name)  # fmt: skip
            torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            if not err < TOL:
                failures.append(f"{name or 'default'} gated={gated}: rel err {err}")
    assert not failures, "; ".join(failures)
    if bits:
        # A dense kernel cannot take quantized experts, nor a quantized one dense experts.
        with pytest.raises(GemmArgumentError, match="operand type"):
            gemm.grouped_matmul(x, w, offsets, index=index, kernel=_grouped(gemm)[0])
        with pytest.raises(GemmArgumentError, match="operand type"):
            gemm.grouped_matmul(x, w_ref.to(dtype), offsets, index=index, kernel=names[0])


@pytest.mark.parametrize("bits", [0, 4, 8], ids=["dense", "w4", "w8"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_a_replayed_call_computes_its_own_operands(gemm, dtype, bits, monkeypatch) -> None:
    """The fast path (gemm_runtime.grouped_fast_path): a second call of the same
    signature, with every tensor new (other weights, routing, bias, C, row scales as
    int64 / bf16 for the runtime to convert), launches without validating again and
    matches the reference of its own operands, for the default choice and every grouped
    kernel of the type forced; with an output given and one allocated."""
    names = [n for n in _grouped(gemm, bits) if gemm.registry.get(n).spec.a_type.value == {torch.float16: "f16",
                                                                                            torch.bfloat16: "bf16"}[dtype]]
    experts, top_k, n, k, tokens = 8, 2, 272, 200, 45
    rows = tokens * top_k

    def operands(seed: int) -> dict:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        w = torch.randn(experts, n, k, device="cuda", dtype=dtype, generator=gen) / k**0.5
        w_ref = w
        if bits:
            w = pack_experts([quantize(we, bits=bits, group_size=32) for we in w])
            w_ref = w.dequantize(torch.float32)
        offsets, index, scale = _routing(tokens, experts, top_k, gen)
        return dict(x=torch.randn(tokens, k, device="cuda", dtype=dtype, generator=gen), w=w, w_ref=w_ref,
                    offsets=offsets.long(), index=index.long(), scale=scale.to(dtype),
                    bias=torch.randn(experts, n, device="cuda", dtype=dtype, generator=gen),
                    c=torch.randn(rows, n // 2, device="cuda", dtype=dtype, generator=gen))  # fmt: skip

    def call(o: dict, name, out):
        return gemm.grouped_matmul(o["x"], o["w"], o["offsets"], index=o["index"], row_scale=o["scale"],
                                   bias=o["bias"], gated=True, alpha=0.5, beta=0.25, c=o["c"], out=out, kernel=name)  # fmt: skip

    first, second = operands(1), operands(2)
    routing = check_routing(second["offsets"], experts=experts, rows=rows, device=second["x"].device, tokens=tokens,
                            index=second["index"], row_scale=second["scale"].float(), check_values=True)  # fmt: skip
    ref = grouped_reference(second["x"], second["w_ref"], routing, bias=second["bias"], alpha=0.5, beta=0.25,
                            c=second["c"], gated=True)  # fmt: skip
    from gemm_runtime import grouped

    validate = grouped.grouped_operands
    failures = []
    for name in [None, *names]:
        for given in (True, False):
            monkeypatch.setattr(grouped, "grouped_operands", validate)
            call(first, name, torch.empty(rows, n // 2, device="cuda", dtype=dtype) if given else None)

            def validated_again(*args, **kwargs):
                raise AssertionError("the replay validated the call again")

            monkeypatch.setattr(grouped, "grouped_operands", validated_again)
            out = torch.full((rows, n // 2), float("nan"), device="cuda", dtype=dtype) if given else None
            out = call(second, name, out)
            torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            if not err < TOL:
                failures.append(f"{name or 'default'} out given={given}: rel err {err}")
    assert not failures, "; ".join(failures)


def test_a_call_on_another_stream_converts_its_routing_there(gemm) -> None:
    """stream= a side stream, int64 routing and bf16 row scales: the converted copies
    (and a TMA kernel's sorted rows) are made on the launch's stream, where the caller
    made the inputs ready, for the validating call and its replay alike."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    experts, top_k, n, k, tokens = 8, 2, 272, 200, 45
    rows = tokens * top_k
    side = torch.cuda.Stream()
    names = [None, *[nm for nm in _grouped(gemm) if gemm.registry.get(nm).spec.a_type.value == "bf16"]]
    failures = []
    for name in names:
        for _ in range(2):  # validated, then replayed
            x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5
            offsets, index, scale = _routing(tokens, experts, top_k, gen)
            routing = check_routing(offsets, experts=experts, rows=rows, device=x.device, tokens=tokens, index=index,
                                    row_scale=scale, check_values=True)  # fmt: skip
            ref = grouped_reference(x, w, routing)
            out = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            # NOTE: the routing's int64 / bf16 forms are made before the side stream waits:
            # made in the call's arguments, after it, the side stream's conversions could
            # read them unwritten (offsets beyond A: an illegal address, about one run in
            # three on an H100).
            offsets64, index64, scale16 = offsets.long(), index.long(), scale.to(torch.bfloat16)
            side.wait_stream(torch.cuda.current_stream())
            gemm.grouped_matmul(x, w, offsets64, index=index64, row_scale=scale16, out=out, kernel=name, stream=side)
            torch.cuda.current_stream().wait_stream(side)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            if not err < TOL:
                failures.append(f"{name or 'default'}: rel err {err}")
    assert not failures, "; ".join(failures)


def test_a_forced_kernel_must_serve_the_launch(gemm) -> None:
    x = torch.randn(4, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(2, 64, 64, device="cuda", dtype=torch.float16)
    offsets = torch.tensor([0, 1, 4], dtype=torch.int32, device="cuda")
    plain = next(k.name for k in gemm.kernels if not k.spec.grouped)
    with pytest.raises(GemmArgumentError, match="not a grouped kernel"):
        gemm.grouped_matmul(x, w, offsets, kernel=plain)
    bf16 = next(n for n in _grouped(gemm) if gemm.registry.get(n).spec.a_type.value == "bf16")
    with pytest.raises(GemmArgumentError, match="operand type is not f16"):
        gemm.grouped_matmul(x, w, offsets, kernel=bf16)
    with pytest.raises(GemmArgumentError, match="not a kernel name|a kernel name"):
        gemm.grouped_matmul(x, w, offsets, kernel="no_such_kernel")
    # The families that do not split K refuse a split (sm90_quant's grouped kernels; the
    # sm80 and sm90 ones take one).
    unsplit = [n for n in _grouped(gemm, 4) if gemm.registry.get(n).spec.a_type.value == "f16"
               and gemm.registry.get(n).spec.mainloop.max_splits(gemm.registry.get(n).spec) == 1]  # fmt: skip
    if gemm.registry.device.arch == 90:
        assert unsplit, "the sm90_quant grouped kernels take no split"
    packed = pack_experts([quantize(we, bits=4, group_size=32) for we in w])
    for name in unsplit[:1]:
        with pytest.raises(GemmArgumentError, match="kernel.splits"):
            gemm.grouped_matmul(x, packed, offsets, kernel=LaunchSpec(name, 2))
    with pytest.raises(GemmArgumentError, match="dispatch"):
        gemm.grouped_matmul(x, w, offsets, dispatch="measure")
    # Operands on another device than the Gemm's (here the CPU) are refused before launch.
    with pytest.raises(GemmArgumentError, match=r"x\.device: got cpu"):
        gemm.grouped_matmul(x.cpu(), w.cpu(), offsets.cpu())


def test_a_measured_grouped_choice_is_cached_exported_and_imported(tmp_path) -> None:
    """MEASURE times the grouped candidates on the caller's operands (into scratch), keeps
    the winner under the grouped key, and the decision survives export and import; the
    result is right whichever kernel won, and C aliasing D is read before it is written."""
    from gemm_runtime import Gemm
    from gemm_runtime.grouped import grouped_key, grouped_operands

    g = Gemm()
    gen = torch.Generator(device="cuda").manual_seed(7)
    tokens, experts, top_k, n, k = 300, 8, 2, 272, 200
    x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5
    offsets, index, scale = _routing(tokens, experts, top_k, gen)
    rows = tokens * top_k
    routing = check_routing(offsets, experts=experts, rows=rows, device=x.device, tokens=tokens, index=index,
                            row_scale=scale, check_values=True)  # fmt: skip
    c = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    ref = grouped_reference(x, w, routing, alpha=0.5, beta=0.25, c=c)
    d = c.clone()
    g.grouped_matmul(x, w, offsets, index=index, row_scale=scale, alpha=0.5, beta=0.25, c=d, out=d,
                     dispatch=DispatchPolicy.MEASURE)  # fmt: skip
    assert rel_err(d, ref) < TOL
    key = grouped_key(grouped_operands(x, w, offsets, index=index, c=c), g.registry.device.arch)
    tuned = g.dispatcher.cache.get(key)
    assert tuned is not None and g.registry.get(tuned.kernel).spec.grouped
    path = tmp_path / "grouped.json"
    g.export_cache(path)
    fresh = Gemm()
    assert fresh.import_cache(path).added >= 1
    assert fresh.dispatcher.cache.get(key) == tuned
    out = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    fresh.grouped_matmul(x, w, offsets, index=index, row_scale=scale, alpha=0.5, beta=0.25, c=c, out=out)
    assert rel_err(out, ref) < TOL


@pytest.mark.parametrize("device", ["cuda", torch.device("cuda"), f"cuda:{torch.cuda.current_device()}"
                                    if torch.cuda.is_available() else "cuda:0"])  # fmt: skip
def test_routing_takes_the_device_as_the_user_names_it(device) -> None:
    """`cuda` and `cuda:N` name the same device as the tensors' `cuda:N`."""
    offsets = torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda")
    routing = check_routing(offsets, experts=2, rows=5, device=device, check_values=True)
    assert routing.experts == 2
    with pytest.raises(GemmArgumentError, match=r"offsets\.device"):
        check_routing(offsets.cpu(), experts=2, rows=5, device=device)
