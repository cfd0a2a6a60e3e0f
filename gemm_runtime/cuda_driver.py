"""The few CUDA driver calls the runtime needs, with errors turned into exceptions.
Kept in one module so the rest of the package never touches cuda.bindings directly."""

from __future__ import annotations

import threading
from typing import Any

from gemm_runtime.errors import CudaError

_tls = threading.local()


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def check(result: tuple, call: str) -> Any:
    """cuda.bindings returns (CUresult, *values); raise on failure, return the values."""
    err, *values = result
    if int(err) != 0:
        raise CudaError(call, err)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def ensure_context(device_index: int) -> None:
    """Make the device's primary context (the one torch uses) current on this thread.
    Cheap after the first call on a thread."""
    if getattr(_tls, "device", None) == device_index:
        return
    drv = _driver()
    check(drv.cuInit(0), "cuInit")
    dev = check(drv.cuDeviceGet(device_index), "cuDeviceGet")
    ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    _tls.device = device_index


def device_attribute(device_index: int, name: str) -> int:
    drv = _driver()
    attr = getattr(drv.CUdevice_attribute, name)
    dev = check(drv.cuDeviceGet(device_index), "cuDeviceGet")
    return int(check(drv.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))


def is_capturing(stream: int) -> bool:
    """Whether ``stream`` (a raw handle) is capturing a CUDA graph."""
    drv = _driver()
    status = check(drv.cuStreamIsCapturing(drv.CUstream(stream)), "cuStreamIsCapturing")
    return int(status) != int(drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


class ProgrammaticLaunch:
    """``cuLaunchKernelEx`` with programmatic stream serialization, called like
    ``cuLaunchKernel`` (so a replay calls either the same way): the kernel may be
    scheduled while the previous one on its stream still runs, and waits for it in
    its own code (grid_dependency_wait, templates/include/gemm/ptx.cuh). One launch
    configuration per grid, block, shared memory and stream, made once (at most
    MAX_CONFIGS kept: grids follow M, which a server varies without end)."""

    MAX_CONFIGS = 4096

    def __init__(self) -> None:
        drv = _driver()
        self._drv = drv
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        self._attrs = [attr]
        self._configs: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def config(self, grid: tuple[int, int, int], threads: int, smem_bytes: int, stream: Any) -> Any:
        """The launch configuration (made on first use, then shared)."""
        key = (grid, threads, smem_bytes, int(stream))
        config = self._configs.get(key)
        if config is None:
            config = self._drv.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = grid
            config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
            config.sharedMemBytes = smem_bytes
            config.hStream = stream
            config.attrs = self._attrs
            config.numAttrs = len(self._attrs)
            with self._lock:
                if len(self._configs) >= self.MAX_CONFIGS:
                    self._configs.clear()  # launch shapes of problems long gone; remade on use
                config = self._configs.setdefault(key, config)
        return config

    def __call__(self, f, gx, gy, gz, bx, by, bz, smem_bytes, stream, params, extra) -> tuple:
        return self._drv.cuLaunchKernelEx(self.config((gx, gy, gz), bx, smem_bytes, stream), f, params, extra)


class LoadedFunction:
    """A kernel loaded from a cubin into the current context."""

    def __init__(self, cubin: bytes, symbol: str, smem_bytes: int, threads: int, cluster: int = 1) -> None:
        drv = _driver()
        self.module = check(drv.cuModuleLoadData(cubin), f"cuModuleLoadData({symbol})")
        self.handle = check(drv.cuModuleGetFunction(self.module, symbol.encode()), f"cuModuleGetFunction({symbol})")
        if smem_bytes > 48 * 1024:
            # NOTE: above 48 KiB a CTA gets dynamic shared memory only after opting in.
            check(
                drv.cuFuncSetAttribute(
                    self.handle, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes
                ),
                f"cuFuncSetAttribute({symbol})",
            )
        self.ctas_per_sm = int(
            check(
                drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.handle, threads, smem_bytes),
                f"cuOccupancyMaxActiveBlocksPerMultiprocessor({symbol})",
            )
        )
        # Clusters of `cluster` CTAs (the kernel's __cluster_dims__) the device holds at once.
        self.max_clusters = 0
        if cluster > 1:
            config = drv.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = cluster, 1, 1
            config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
            config.sharedMemBytes = smem_bytes
            config.numAttrs = 0
            self.max_clusters = int(
                check(drv.cuOccupancyMaxActiveClusters(self.handle, config), f"cuOccupancyMaxActiveClusters({symbol})")
            )
        self._launch = drv.cuLaunchKernel
        self._stream_type = drv.CUstream

    def use_programmatic_launch(self, launcher: ProgrammaticLaunch) -> None:
        """Launch from now on with programmatic stream serialization (sm_90 up)."""
        self._launch = launcher

    def launcher(self, stream: int) -> tuple[Any, Any, Any]:
        """(cuLaunchKernel or a ProgrammaticLaunch, this function, the stream's
        CUstream): what a replay calls
        with made objects, so that no argument is converted per call.

        NOTE: measured on the H200's host, cuda.bindings' cuLaunchKernel with made
        objects and the parameter array's address costs 4.5 us, libcuda's through ctypes
        5.8 us (docs/PERFORMANCE.md)."""
        return self._launch, self.handle, self._stream_type(stream)

    def launch(self, grid: tuple[int, int, int], threads: int, smem_bytes: int, stream: Any, params_addr: int) -> None:
        """``stream``: a raw handle or a CUstream; ``params_addr``: address of a
        one-entry void* array pointing at the packed struct."""
        if type(stream) is not self._stream_type:
            stream = self._stream_type(stream)
        (err,) = self._launch(self.handle, grid[0], grid[1], grid[2], threads, 1, 1, smem_bytes, stream, params_addr, 0)
        if int(err) != 0:
            programmatic = isinstance(self._launch, ProgrammaticLaunch)
            raise CudaError("cuLaunchKernelEx" if programmatic else "cuLaunchKernel", err)
