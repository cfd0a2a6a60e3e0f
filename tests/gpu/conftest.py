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


@pytest.fixture(scope="session")
def hopper() -> None:
    """Compute capability 9.0 with a current driver context: where the sm_90a smoke
    kernels (compiled and launched by the tests themselves) run."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        pytest.skip(f"sm_90a kernels run on compute capability 9.0 only (this GPU: {cap[0]}.{cap[1]})")
    from gemm_runtime import cuda_driver

    torch.cuda.init()
    cuda_driver.ensure_context(torch.cuda.current_device())
