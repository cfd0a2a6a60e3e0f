"""What the SM90 family adds beyond the matrix every dense kernel goes through
(test_dense_kernels.py, test_epilogues_and_nn.py): split-K and the rasterization of
its persistent scheduler on every sm90 kernel, more work units than CTAs, both of
its epilogue stores (TMA where D's rows are 16-byte multiples, direct where not),
and descriptors that follow the operands from call to call on the replay path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from codegen.vocabulary import BOrder
from gemm_runtime import Epilogue, Operation, Workspace
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.types import torch_dtype
from tests.gpu.util import rel_err, round_up, shared_gemm

pytestmark = pytest.mark.gpu


def _sm90_names(splitting: bool = False):
    """The sm90 kernels of the build; ``splitting``: those that split K (cluster kernels
    do not: codegen/families/sm90.py, max_splits)."""
    if not torch.cuda.is_available():
        return ["no-gpu"]
    return [k.name for k in shared_gemm().kernels if k.spec.mainloop.value == "sm90" and not k.spec.grouped
            and not (splitting and k.spec.cluster > 1)]  # fmt: skip


def _operands(spec, m, n, k, gen):
    dt = torch_dtype(spec.a_type)
    a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
    w = torch.randn(n, k, device="cuda", dtype=dt, generator=gen)
    return a, (w.t() if spec.b_order is BOrder.NK else w.t().contiguous())


def test_hopper_builds_have_sm90_kernels(gemm):
    if gemm.registry.device.arch != 90:
        pytest.skip("sm_90a kernels run on compute capability 9.0 only")
    names = _sm90_names()
    assert len(names) >= 20, names
    assert all(gemm.registry.get(n).ctas_per_sm == 1 for n in names)


@pytest.mark.parametrize("name", _sm90_names())
@pytest.mark.parametrize("splits, swizzle", [(1, 3), (2, 0), (3, 1), (7, 2)])
def test_split_k_and_rasterization(gemm, name, splits, swizzle):
    if name == "no-gpu":
        pytest.skip("needs a CUDA GPU")
    kern = gemm.registry.get(name)
    spec = kern.spec
    gen = torch.Generator(device="cuda").manual_seed(hash((name, splits)) % 2**31)
    od = torch_dtype(spec.d_type)
    # 6 K tiles over 7 splits leaves one split without a tile; the tile counts leave a
    # partial rasterization group and more units than the grid has CTAs.
    m, n, k = 5 * spec.cta[0] + 3, 3 * spec.cta[1] + 8, 6 * spec.cta[2] - 8
    a, b = _operands(spec, m, n, k, gen)
    c = torch.randn(m, n, device="cuda", dtype=od, generator=gen)
    ref = 0.5 * (a.float() @ b.float()) - 2.0 * c.float()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=od)
    ws = Workspace.allocate(torch.device("cuda"))
    if spec.cluster > 1 and splits > 1:
        # Cluster kernels do not split (codegen/families/sm90.py: max_splits).
        with pytest.raises(GemmArgumentError, match="kernel.splits"):
            gemm.matmul(a, b, out=out, kernel=LaunchSpec(name, splits, swizzle), workspace=ws)
        return
    gemm.matmul(a, b, out=out, alpha=0.5, beta=-2.0, c=c, kernel=LaunchSpec(name, splits, swizzle), workspace=ws)
    assert rel_err(out, ref) < 1e-2
    assert int(ws.barriers.abs().sum()) == 0, "semaphores must be zero after the call"


@pytest.mark.parametrize("name", _sm90_names(splitting=True))
@pytest.mark.parametrize("splits", [2, 3])
def test_split_k_of_the_last_round_only(gemm, name, splits):
    """More tiles than the grid has CTAs: the tiles of whole rounds run unsplit, the
    rest split (schedule_sm90.cuh: sm90_whole_tiles), on one launch, through a workspace
    of exactly the split tiles' semaphores and partials: the kernel numbers its slots
    among the split tiles (Sm90Unit::split_tile). NaN guards behind the partials must
    stay untouched (a kernel indexing by output tile writes there), and a workspace one
    partial tile short is refused."""
    if name == "no-gpu":
        pytest.skip("needs a CUDA GPU")
    kern = gemm.registry.get(name)
    spec = kern.spec
    from gemm_runtime.context import make_key
    from gemm_runtime.feasibility import grid_of

    gen = torch.Generator(device="cuda").manual_seed(hash((name, splits, 7)) % 2**31)
    od = torch_dtype(spec.d_type)
    # 12 x 13 tiles against one round of the grid (one CTA per SM): the last tiles split.
    tm, tn = 12, -(-(kern.resident + 24) // 12)
    m, n, k = tm * spec.cta[0] - 5, tn * spec.cta[1] - 8, 5 * spec.cta[2] + 24
    tiles = tm * tn
    assert tiles > kern.resident
    plan = LaunchSpec(name, splits, 3)
    key = make_key(spec.a_type, spec.b_order, spec.d_type, m, n, k, arch=90)
    # The split tiles as the kernel counts them (sm90_whole_tiles over gridDim.x, schedule_sm90.cuh), not
    # through the family's hook (Sm90Family.split_tiles), which the refusal below checks.
    grid = grid_of(spec, key, plan, kern.resident)[0]
    split = tiles - tiles // grid * grid
    assert 0 < split < tiles
    tile_floats = spec.cta[0] * spec.cta[1]
    need = (splits - 1) * split * tile_floats
    # Room for every tile's slot behind the exact workspace, so that output-tile slots
    # land in the guards rather than past the allocation (the split tiles are the last
    # ones of the rasterization: their output-tile indices are all >= split).
    semaphores = torch.zeros(tiles, dtype=torch.int32, device="cuda")
    partials = torch.full(((splits - 1) * tiles * tile_floats,), float("nan"), device="cuda")
    ws = Workspace(semaphores[:split], partials[:need])
    a, b = _operands(spec, m, n, k, gen)
    c = torch.randn(m, n, device="cuda", dtype=od, generator=gen)
    ref = (a.float() @ b.float()) + 0.5 * c.float()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=od)
    gemm.matmul(a, b, out=out, beta=0.5, c=c, kernel=plan, workspace=ws)
    assert rel_err(out, ref) < 1e-2
    assert int(semaphores.abs().sum()) == 0, "semaphores must be zero after the call"
    assert bool(torch.isnan(partials[need:]).all()), "partials written outside the split tiles' slots"
    # NOTE: fresh tensors, so the refusal cannot come from (or be skipped by) the replay
    # of the launch just validated for the same operands.
    short = Workspace(semaphores[:split].clone(), partials[: need - tile_floats].clone())
    with pytest.raises(GemmArgumentError, match="kernel.splits") as info:
        gemm.matmul(a, b, out=out, beta=0.5, c=c, kernel=plan, workspace=short)
    assert f"for the {split} tiles that split" in info.value.accepted


@pytest.mark.parametrize("name", _sm90_names())
def test_the_even_grid(gemm, name):
    """Tiles for four rounds with a partial last one: the unsplit launch runs on the
    fewest CTAs that take four rounds (Sm90Family.balanced_units), below the resident
    count, each CTA walking its share; every tile of D written."""
    if name == "no-gpu":
        pytest.skip("needs a CUDA GPU")
    from gemm_runtime.context import make_key
    from gemm_runtime.feasibility import grid_of

    kern = gemm.registry.get(name)
    spec = kern.spec
    slots = kern.resident // spec.cluster
    tn = 16
    tm = spec.cluster * ((4 * slots - 1) // tn)  # units: four rounds, the last a few short
    m, n, k = tm * spec.cta[0] - 3, tn * spec.cta[1] - 8, 2 * spec.cta[2] + 8
    key = make_key(spec.a_type, spec.b_order, spec.d_type, m, n, k, arch=90)
    grid = grid_of(spec, key, LaunchSpec(name), kern.resident)
    assert grid[0] < kern.resident, (grid, kern.resident)
    gen = torch.Generator(device="cuda").manual_seed(13)
    a, b = _operands(spec, m, n, k, gen)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype(spec.d_type))
    gemm.matmul(a, b, out=out, kernel=name)
    assert rel_err(out, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("name", _sm90_names())
@pytest.mark.parametrize("last_rows", [17, 64, 65])
def test_many_tiles_per_cta(gemm, name, last_rows):
    """Several work units per CTA: the ring and its barrier phases run on across tiles.
    D's last tile row holds `last_rows`: inside a 128-row tile's first warpgroup's 64
    rows, all of them, and one row into the second's."""
    if name == "no-gpu":
        pytest.skip("needs a CUDA GPU")
    spec = gemm.registry.get(name).spec
    gen = torch.Generator(device="cuda").manual_seed(11 + last_rows)
    m, n, k = 2048 + last_rows, 2304 - 8, 1000
    a, b = _operands(spec, m, n, k, gen)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype(spec.d_type))
    gemm.matmul(a, b, out=out, kernel=name)
    assert rel_err(out, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("name", _sm90_names())
@pytest.mark.parametrize("pad", [8, 1])
def test_both_stores_write_d_and_nothing_else(gemm, name, pad):
    """D as a view of a wider, taller NaN buffer whose rows are a multiple of 8 elements
    plus `pad`: 8 keeps them 16-byte multiples (the TMA store), 1 does not (the direct
    store). C aliases D.
    A second consumer warpgroup holding 3 rows of D must write those and no more; the
    gated epilogue stores through TMA only where a tile is whole 128-byte boxes of D."""
    if name == "no-gpu":
        pytest.skip("needs a CUDA GPU")
    spec = gemm.registry.get(name).spec
    gen = torch.Generator(device="cuda").manual_seed(hash((name, pad)) % 2**31)
    od = torch_dtype(spec.d_type)
    m, n, k = spec.cta[0] + 67, 2 * spec.cta[1] + 24, 200
    a, b = _operands(spec, m, n, k, gen)
    acc = a.float() @ b.float()
    for cols, gated in ((n, False), (n // 2, True)):
        base = torch.full((m + 5, round_up(cols, 8) + pad), float("nan"), device="cuda", dtype=od)
        out = base[:m, :cols]
        out.copy_(torch.randn(m, cols, device="cuda", generator=gen))
        c = out.float()
        if gated:
            ref = F.silu(acc[:, 0::2]) * acc[:, 1::2] + 0.5 * c
            gemm.matmul(a, b, out=out, c=out, beta=0.5, kernel=name, operation=Operation(epilogue=Epilogue.GATED_SILU))
        else:
            ref = acc + 0.5 * c
            gemm.matmul(a, b, out=out, c=out, beta=0.5, kernel=name)
        assert rel_err(out, ref) < 1e-2, f"gated={gated}"
        assert torch.isnan(base[:m, cols:]).all() and torch.isnan(base[m:]).all(), f"gated={gated}: wrote outside D"


@pytest.mark.parametrize("b_order", [BOrder.NK, BOrder.KN])
def test_replay_never_uses_a_stale_descriptor(gemm, b_order):
    """The replay path re-encodes a tensor map whenever its operand moved: each call
    changes A, B, or both, and must compute with what it was given."""
    kern = next((k for k in gemm.kernels if k.spec.mainloop.value == "sm90" and not k.spec.grouped and k.spec.b_order is b_order
                 and k.spec.d_type is k.spec.a_type), None)  # fmt: skip
    if kern is None:
        pytest.skip("no sm90 kernel in this build")
    spec = kern.spec
    gen = torch.Generator(device="cuda").manual_seed(5)
    m, n, k = 300, 520, 264
    operands = [_operands(spec, m, n, k, gen) for _ in range(3)]
    out = torch.empty(m, n, device="cuda", dtype=torch_dtype(spec.d_type))
    for i, j in [(0, 0), (1, 0), (1, 1), (2, 2), (0, 2), (0, 0)]:
        a, b = operands[i][0], operands[j][1]
        out.fill_(float("nan"))
        gemm.matmul(a, b, out=out, kernel=kern.name)
        assert rel_err(out, a.float() @ b.float()) < 1e-2, f"A{i} B{j}"


def test_k_zero_is_refused_with_the_reason(gemm):
    kern = next((k for k in gemm.kernels if k.spec.mainloop.value == "sm90" and not k.spec.grouped and k.spec.d_type is k.spec.a_type), None)
    if kern is None:
        pytest.skip("no sm90 kernel in this build")
    dt = torch_dtype(kern.spec.a_type)
    # Views of padded rows, so that the rows stay 16-byte aligned (align 8) with K = 0.
    a = torch.randn(64, 8, device="cuda", dtype=dt)[:, :0]
    if kern.spec.b_order is BOrder.NK:
        b = torch.randn(128, 8, device="cuda", dtype=dt)[:, :0].t()
    else:
        b = torch.randn(0, 128, device="cuda", dtype=dt)
    with pytest.raises(GemmArgumentError, match="K = 0"):
        gemm.matmul(a, b, kernel=kern.name)
    # Default dispatch still serves it (D = 0) with another family.
    assert gemm.matmul(a, b).abs().sum() == 0


def test_prefill_dispatch_picks_the_sm90_family(gemm):
    if gemm.registry.device.arch != 90:
        pytest.skip("sm_90a kernels run on compute capability 9.0 only")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    from gemm_runtime.context import make_problem
    from gemm_runtime.types import MatrixLayout, Operation

    out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = w.t()
    key = make_problem(Operation(), a, MatrixLayout.of(a), b, MatrixLayout.of(b), 0.0, None, None, out,
                       MatrixLayout.of(out), gemm.device, gemm.registry.device.arch).key  # fmt: skip
    assert gemm.registry.get(gemm.select(key).kernel).spec.mainloop.value == "sm90"
