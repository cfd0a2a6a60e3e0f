"""Registry rules and the heuristic, with fake specs: no GPU needed."""

from __future__ import annotations

from codegen.params import PARAM_STRUCT, cpp_struct
from codegen.vocabulary import BOrder, DataType, MmaAtom
from gemm_runtime.context import Problem, ProblemKey
from gemm_runtime.heuristic import predicted_cost
from gemm_runtime.launch import pack_params
from gemm_runtime.registry import compatible_cubin_archs, filter_reason
from tests.helpers import spec_for


def test_cubin_arch_compatibility():
    assert compatible_cubin_archs(90, [75, 80, 86, 90]) == [90]
    assert compatible_cubin_archs(89, [75, 80, 86, 90]) == [80, 86]
    assert compatible_cubin_archs(86, [80, 90]) == [80]
    assert compatible_cubin_archs(75, [80, 90]) == []


def test_filter_reasons():
    s = spec_for()
    assert filter_reason(s, 90, 232448, False) is None
    assert "excludes sm_75" in filter_reason(s, 75, 65536, False)
    big = spec_for(cta=(128, 256, 64), warps=(2, 4, 1), stages=4)
    assert "shared memory" in filter_reason(big, 86, 101376, False)
    emulated = spec_for(mma=MmaAtom.M8N8K4, arch_min=70, arch_max=90)
    assert "emulated" in filter_reason(emulated, 90, 232448, False)
    assert filter_reason(emulated, 90, 232448, True) is None
    assert filter_reason(emulated, 70, 98304, False) is None


def test_heuristic_prefers_small_tiles_for_decode_and_big_tiles_for_prefill():
    small = spec_for(cta=(16, 64, 128), warps=(1, 2, 2))
    big = spec_for(cta=(128, 256, 32), warps=(2, 4, 1), stages=3)
    decode = ProblemKey(DataType.F16, BOrder.NK, DataType.F16, 8, 1, 4096, 4096)
    prefill = ProblemKey(DataType.F16, BOrder.NK, DataType.F16, 8, 8192, 8192, 8192)
    assert predicted_cost(small, 4, 132, decode) < predicted_cost(big, 1, 132, decode)
    assert predicted_cost(big, 1, 132, prefill) < predicted_cost(small, 4, 132, prefill)


def test_heuristic_is_monotonic_in_problem_size():
    s = spec_for()
    costs = [predicted_cost(s, 2, 132, ProblemKey(DataType.F16, BOrder.NK, DataType.F16, 8, m, 4096, 4096))
             for m in (128, 1024, 4096, 16384)]
    assert costs == sorted(costs)


def test_low_alignment_kernels_rank_last():
    key = ProblemKey(DataType.F16, BOrder.NK, DataType.F16, 8, 256, 4096, 4096)
    assert predicted_cost(spec_for(align=8), 2, 132, key) < predicted_cost(spec_for(align=2), 2, 132, key)


def test_params_pack_matches_the_declared_struct():
    key = ProblemKey(DataType.F16, BOrder.NK, DataType.F16, 8, 3, 5, 7)
    packed = pack_params(Problem(key, 1, 2, 3, 4, 11, 12, 13, 14, True), 0.5, 2.0)
    assert len(packed) == PARAM_STRUCT.size
    values = dict(zip([f.split()[-1].rstrip(";") for f in cpp_struct().splitlines()[1:-2]], PARAM_STRUCT.unpack(packed)))
    assert (values["A"], values["B"], values["C"], values["D"]) == (1, 2, 3, 4)
    assert (values["lda"], values["ldb"], values["ldc"], values["ldd"]) == (11, 12, 13, 14)
    assert (values["M"], values["N"], values["K"]) == (3, 5, 7)
    assert (values["alpha"], values["beta"]) == (0.5, 2.0)
    no_c = pack_params(Problem(key, 1, 2, 0, 4, 11, 12, 0, 14, False), 0.5, 2.0)
    assert dict(zip(values, PARAM_STRUCT.unpack(no_c)))["beta"] == 0.0
