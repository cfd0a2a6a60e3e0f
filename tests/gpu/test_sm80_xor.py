"""GPU test of the sm80_xor family (K tiles of 32 in XOR-swizzled shared rows;
tests/sm80_xor_kernels.py builds its tiles, which the default set does not have): every
kernel through the checks the default set's kernels take, run on this build. Dense:
against the fp32 product at M from 1 to 1000 with residues on N and K (K below the
vector width included), padded rows, NaN-poisoned outputs whose padding must survive;
many whole K tiles on interior CTAs (the lean copies' path), unsplit and split; alpha,
beta and C aliasing D. Grouped: uneven, empty and single-row experts, sorted and
gathered A, row scales, split K, many K tiles, and the epilogues."""

from __future__ import annotations

import pytest

from tests.gpu import test_dense_kernels as dense
from tests.gpu import test_grouped_kernels as grouped
from tests.gpu.util import experimental_gemm, registered_spec
from tests.sm80_xor_kernels import build, kernel_names

pytestmark = pytest.mark.gpu

_DENSE = [n for n in kernel_names() if not n.endswith("_grouped")]
_GROUPED = [n for n in kernel_names() if n.endswith("_grouped")]


def _cases():
    """(the default set's check, a kernel, the check's further arguments) for each."""
    yield from dense.cases_for(_DENSE)
    for name in _GROUPED:
        for routing in grouped.ROUTINGS:
            yield pytest.param(grouped.test_grouped_kernel_matches_the_reference, name, (routing,),
                               id=f"{name}-{routing}")  # fmt: skip
        yield pytest.param(grouped.test_grouped_kernel_over_many_k_tiles, name, (), id=f"{name}-many-k-tiles")
        yield pytest.param(grouped.test_grouped_epilogues, name, (), id=f"{name}-epilogues")


@pytest.fixture(scope="module")
def xor_gemm(tmp_path_factory):
    return experimental_gemm(tmp_path_factory, "sm80_xor", build)


@pytest.mark.parametrize("check, name, args", list(_cases()))
def test_xor_kernel(xor_gemm, check, name, args):
    registered_spec(xor_gemm, name)
    check(xor_gemm, name, *args)
