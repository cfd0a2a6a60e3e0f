import pytest
import torch


@pytest.fixture(scope="session")
def gemm():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tests.gpu.util import shared_gemm

    return shared_gemm()
