"""gemm_runtime.whole_weight on the CPU: which problems whole-weight plans serve, their
dense key and buffer, their price, how the dispatcher ranks them beside the quantized
kernels, and how forced, cached and imported ones are checked (fake kernels with the
default set's specs; their results on a GPU: tests/gpu/test_whole_weight.py)."""

from __future__ import annotations

import io
import json

import pytest

from codegen.families import Mainloop
from codegen.vocabulary import BOrder, DataType
from gemm_runtime import whole_weight
from gemm_runtime.context import make_key
from gemm_runtime.dispatch_cache import DispatchCache
from gemm_runtime.dispatcher import Dispatcher
from gemm_runtime.errors import DispatchCacheWarning, GemmArgumentError
from gemm_runtime.feasibility import launch_error
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.settings import override
from gemm_runtime.types import DispatchPolicy
from gemm_runtime.unpack import row_pitch
from tests.runtime.test_cost_model import H200, _kernels

WORKSPACE = (1 << 20, 32 << 20)


def w4(m: int, n: int = 28672, k: int = 4096, *, arch: int = 90, quant: str = "u4g128"):
    bits = DataType.U4 if quant.startswith("u4") else DataType.U8
    return make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=arch)._replace(b_type=bits, quant=quant)


def sm80_class() -> Dispatcher:
    """The default set's mma.sync kernels only, as an Ampere or Ada GPU has them."""
    kernels = [k for k in _kernels(90) if k.spec.mainloop in (Mainloop.SM80, Mainloop.SM70)]
    return Dispatcher(kernels, H200, DispatchCache(90, "fake"), WORKSPACE)


def every_family() -> Dispatcher:
    return Dispatcher(list(_kernels(90)), H200, DispatchCache(90, "fake"), WORKSPACE)


def test_the_dense_key_and_the_buffer():
    key = w4(1024, 75, 201, quant="u8g32")
    dense = whole_weight.dense_key(key)
    assert (dense.b_type, dense.quant) == (DataType.F16, "none")
    assert dense._replace(b_type=key.b_type, quant=key.quant) == key  # nothing else changes
    assert row_pitch(201) == 208 and row_pitch(208) == 208
    assert whole_weight.buffer_bytes(key) == 75 * 208 * 2


def test_which_problems_whole_weight_plans_serve():
    assert whole_weight.unpack_error(w4(4096)) is None
    assert "dense" in whole_weight.unpack_error(whole_weight.dense_key(w4(4096)))
    assert "grouped" in whole_weight.unpack_error(w4(4096)._replace(experts=8))
    # llama3-70b gate_up: 57344 x 8192 halves, 896 MiB, within the default 1 GiB.
    assert whole_weight.unpack_error(w4(4096, 57344, 8192)) is None
    with override(unpack_max_mib=512):
        assert "896 MiB) exceeds GEMM_UNPACK_MAX_MIB (512 MiB)" in whole_weight.unpack_error(w4(4096, 57344, 8192))
    with override(unpack_max_mib=0):
        assert not whole_weight.ranked(w4(4096))
    assert not whole_weight.ranked(w4(whole_weight.MIN_M - 1)) and whole_weight.ranked(w4(whole_weight.MIN_M))


# The unpack's time on the H200 (bench.experiments.sm80_unpack_then_dense, 2026-12-04,
# groups of 128): llama3-8b gate_up, 8b o, 70b gate_up.
UNPACK_MEASURED_US = {(28672, 4096): 83.2, (4096, 4096): 14.6, (57344, 8192): 332.6}


@pytest.mark.parametrize("nk", list(UNPACK_MEASURED_US))
def test_the_unpack_is_priced_as_measured(nk):
    predicted = whole_weight.unpack_seconds(w4(4096, *nk), H200) * 1e6
    assert predicted == pytest.approx(UNPACK_MEASURED_US[nk], rel=0.15)
    assert whole_weight.unpack_seconds(w4(4096, *nk, quant="u8g128"), H200) * 1e6 > predicted  # more bytes read


def test_whole_weight_plans_lead_sm80_class_prefill_and_not_the_wgmma_family():
    """Measured on the H200: unpack + the sm80 fp16 kernel 1.03-1.16x the fp16 kernel's
    time at M = 1024-4096, the sm80 W4 kernels 1.45-1.94x; sm90_quant 0.98-0.99x of
    cuBLAS, where unpack + an sm90 dense kernel would be ~0.96x."""
    for m in (1024, 4096):
        assert sm80_class().predicted(w4(m)).unpack
        assert not every_family().predicted(w4(m)).unpack
    assert not any(plan.unpack for _, plan in sm80_class().ranked(w4(whole_weight.MIN_M - 1)))


def test_the_ranking_holds_a_few_dense_kernels_priced_with_the_unpack():
    d = sm80_class()
    key = w4(4096)
    ranking = d.ranked(key)
    assert [c for c, _ in ranking] == sorted(c for c, _ in ranking)
    unpacked = [(c, p) for c, p in ranking if p.unpack]
    assert len({p.kernel for _, p in unpacked}) == whole_weight.KERNELS
    assert any(not p.unpack for _, p in ranking)  # the quantized kernels stay in the contest
    dense_ranking = dict((p, c) for c, p in d.ranked(whole_weight.dense_key(key)))
    unpack = whole_weight.unpack_seconds(key, H200)
    for cost, plan in unpacked:
        dense_plan = LaunchSpec(plan.kernel, plan.splits, plan.swizzle)
        assert cost == pytest.approx(dense_ranking[dense_plan] + unpack)
        assert d.kernel(plan.kernel).spec.b_type is DataType.F16


def test_forced_whole_weight_plans_are_checked_like_the_others():
    d = sm80_class()
    key = w4(4096)
    dense = d.ranked(whole_weight.dense_key(key))[0][1]
    plan = LaunchSpec(dense.kernel, 1, 0, unpack=True)
    assert d.forced(plan, key, WORKSPACE) == plan
    with pytest.raises(GemmArgumentError, match=r"^kernel.unpack: got True.*False for .*nothing to unpack"):
        d.forced(plan, whole_weight.dense_key(key), WORKSPACE)
    with pytest.raises(GemmArgumentError, match=r"^kernel: got .*a kernel that can serve"):
        d.forced(LaunchSpec(dense.kernel), key, WORKSPACE)  # a dense kernel on the packed weight
    quant_kernel = next(p for _, p in d.ranked(key) if not p.unpack)
    with pytest.raises(GemmArgumentError, match=r"^kernel: got .*a kernel that can serve"):
        d.forced(LaunchSpec(quant_kernel.kernel, unpack=True), key, WORKSPACE)
    with override(unpack_max_mib=1):
        assert launch_error(d.kernel(dense.kernel).spec, plan, key) is not None


def test_a_cached_whole_weight_plan_over_the_buffer_limit_gives_way():
    d = sm80_class()
    key = w4(4096)
    plan = d.predicted(key)
    assert plan.unpack
    d.cache.put(key, plan)
    assert d.select(key) == plan
    with override(unpack_max_mib=16):
        chosen = d.select(key, DispatchPolicy.REUSE)
        assert not chosen.unpack and d.usable(plan, key) is None


def test_whole_weight_plans_round_trip_the_cache_file_and_are_checked_on_import():
    d = sm80_class()
    key = w4(4096)
    plan = d.predicted(key)
    d.cache.put(key, plan)
    text = d.cache.to_json_text()
    assert [r["launch"].get("unpack") for r in json.loads(text)["records"]] == [True]
    fresh = sm80_class()
    report = fresh.import_cache(io.StringIO(text))
    assert fresh.cache.get(key) == plan, report
    with override(unpack_max_mib=16), pytest.warns(DispatchCacheWarning, match="exceeds GEMM_UNPACK_MAX_MIB"):
        refused = sm80_class()
        refused.import_cache(io.StringIO(text))
    assert refused.cache.get(key) is None


def test_launch_spec_json_of_the_unpack_field():
    plan = LaunchSpec("k", 2, 1, unpack=True)
    assert LaunchSpec.from_json(plan.to_json()) == plan
    assert "unpack" not in LaunchSpec("k").to_json()  # files of earlier versions read the same
    assert LaunchSpec.from_json({"kernel": "k"}).unpack is False
    with pytest.raises(TypeError, match="unpack must be true or false, got 1"):
        LaunchSpec.from_json({"kernel": "k", "unpack": 1})


def test_the_buffer_limit_from_the_environment(monkeypatch):
    from gemm_runtime import settings as settings_mod

    monkeypatch.delenv("GEMM_UNPACK_MAX_MIB", raising=False)
    assert settings_mod.from_env().unpack_max_mib == 1024
    for text, mib in (("0", 0), (" 2048 ", 2048)):
        monkeypatch.setenv("GEMM_UNPACK_MAX_MIB", text)
        assert settings_mod.from_env().unpack_max_mib == mib
    for bad in ("-1", "1.5", "lots"):
        monkeypatch.setenv("GEMM_UNPACK_MAX_MIB", bad)
        with pytest.raises(ValueError, match=f"GEMM_UNPACK_MAX_MIB={bad!r}: expected an integer >= 0"):
            settings_mod.from_env()
