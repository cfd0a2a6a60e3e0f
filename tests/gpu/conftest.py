import pytest
import torch


@pytest.fixture(scope="session")
def gemm():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tests.gpu.util import shared_gemm

    return shared_gemm()


@pytest.fixture(scope="session")
def gemm_all():
    """Every kernel built for this GPU, emulated MMAs included (for correctness only)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tests.gpu.util import shared_gemm

    return shared_gemm(allow_emulated=True)
