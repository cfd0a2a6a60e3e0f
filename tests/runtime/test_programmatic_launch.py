"""Programmatic dependent launch without a GPU: the launch configuration
gemm_runtime.cuda_driver.ProgrammaticLaunch hands cuLaunchKernelEx (the attribute, the
grid, one configuration per launch shape and stream), Gemm's argument check, and that
every generated kernel waits for the previous grid before anything else
(tests/gpu/test_programmatic_launch.py runs the chains)."""

from __future__ import annotations

import pytest

from codegen.config import default_config_paths, load_configs
from codegen.render import render_kernel
from gemm_runtime.cuda_driver import ProgrammaticLaunch
from gemm_runtime.errors import GemmArgumentError

drv = pytest.importorskip("cuda.bindings.driver")


class _RecordingDriver:
    """cuda.bindings' driver with cuLaunchKernelEx recorded instead of called."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        return getattr(drv, name)

    def cuLaunchKernelEx(self, config, f, params, extra):  # noqa: N802 (the driver's name)
        self.calls.append((config, f, params, extra))
        return (drv.CUresult.CUDA_SUCCESS,)


def test_the_launch_carries_the_attribute_and_the_shape() -> None:
    launch = ProgrammaticLaunch()
    recording = _RecordingDriver()
    launch._drv = recording
    stream = drv.CUstream(0)
    (err,) = launch("function", 7, 3, 1, 384, 1, 1, 200_000, stream, 0xABC0, 0)
    assert int(err) == 0
    (config, f, params, extra), = recording.calls
    assert (f, params, extra) == ("function", 0xABC0, 0)
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (7, 3, 1)
    assert (config.blockDimX, config.blockDimY, config.blockDimZ) == (384, 1, 1)
    assert config.sharedMemBytes == 200_000 and config.numAttrs == 1
    attr = config.attrs[0]
    assert attr.id == drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attr.value.programmaticStreamSerializationAllowed == 1
    # One configuration per launch shape and stream, reused by later launches.
    launch("function", 7, 3, 1, 384, 1, 1, 200_000, stream, 0xABC0, 0)
    launch("function", 8, 3, 1, 384, 1, 1, 200_000, stream, 0xABC0, 0)
    assert recording.calls[1][0] is config and recording.calls[2][0] is not config
    assert recording.calls[2][0].gridDimX == 8
    # Bounded: past MAX_CONFIGS the kept ones are dropped and remade on use.
    launch.MAX_CONFIGS = 3
    for gx in (9, 10, 11):
        launch("function", gx, 1, 1, 128, 1, 1, 0, stream, 0, 0)
    assert len(launch._configs) <= 3
    assert launch.config((11, 1, 1), 128, 0, stream).gridDimX == 11


@pytest.mark.parametrize("value", [1, "yes", None])
def test_gemm_checks_the_argument(value) -> None:
    from gemm_runtime import Gemm

    with pytest.raises(GemmArgumentError, match="programmatic_launch"):
        Gemm(programmatic_launch=value)


def test_every_kernel_waits_before_its_mainloop() -> None:
    """One kernel of each template: the wait comes before the mainloop's entry, which
    is where every global access happens."""
    seen = {}
    for k in load_configs(default_config_paths()):
        seen.setdefault(k.spec.mainloop.template, k.spec)
    assert set(seen) == {"kernel.cu.j2", "kernel_sm90.cu.j2", "kernel_sm90_quant.cu.j2"}
    for spec in seen.values():
        source = render_kernel(spec, "test")
        body = source[source.index(f"{spec.name}("):]
        assert body.index("gemm::grid_dependents_launch();") < body.index("gemm::grid_dependency_wait();")
        assert body.index("gemm::grid_dependency_wait();") < body.index(f"{spec.mainloop.entry}<Config>(")
