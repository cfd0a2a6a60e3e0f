"""The kernels of build/ that run on one device: pick the cubin directory that fits the
GPU's arch, filter by the family's arch range, shared memory and native MMA support,
and load what remains.

A manifest entry whose cubin is missing or damaged (build_manifest.verify) is skipped
with a warning and listed in ``filtered`` with the problem; a manifest that cannot be
read at all is a NoKernelsError naming it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from codegen.spec import KernelSpec
from codegen.vocabulary import KNOWN_ARCHS
from gemm_runtime import build_manifest
from gemm_runtime.cuda_driver import LoadedFunction, device_attribute, ensure_context
from gemm_runtime.errors import GemmArgumentError, NoKernelsError


@dataclass(frozen=True)
class Kernel:
    spec: KernelSpec
    arch: int  # arch of the cubin
    registers: int
    spills: int
    function: LoadedFunction
    sms: int = 1  # the device's SM count

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def ctas_per_sm(self) -> int:
        return self.function.ctas_per_sm

    @property
    def resident(self) -> int:
        """CTAs of this kernel the device holds at once (in whole clusters)."""
        if self.spec.cluster > 1:
            return max(1, self.function.max_clusters) * self.spec.cluster
        return max(1, self.sms * self.ctas_per_sm)


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    arch: int  # 10 * major + minor
    sms: int
    smem_optin: int
    clock_khz: int = 0
    mem_clock_khz: int = 0
    bus_bits: int = 0

    @classmethod
    def query(cls, index: int) -> "DeviceInfo":
        def attr(name: str) -> int:
            return device_attribute(index, f"CU_DEVICE_ATTRIBUTE_{name}")

        return cls(
            index=index,
            arch=10 * attr("COMPUTE_CAPABILITY_MAJOR") + attr("COMPUTE_CAPABILITY_MINOR"),
            sms=attr("MULTIPROCESSOR_COUNT"),
            smem_optin=attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            clock_khz=attr("CLOCK_RATE"),
            mem_clock_khz=attr("MEMORY_CLOCK_RATE"),
            bus_bits=attr("GLOBAL_MEMORY_BUS_WIDTH"),
        )


def compatible_cubin_archs(device_arch: int, available: list[int]) -> list[int]:
    """Cubins run on GPUs of the same major version and an equal or higher minor version.
    Ascending, so that a later (closer) arch overrides an earlier one."""
    return sorted(a for a in available if a // 10 == device_arch // 10 and a <= device_arch)


def filter_reason(
    spec: KernelSpec, device_arch: int, smem_optin: int, allow_emulated: bool, cubin_arch: int | None = None
) -> str | None:
    """Why a kernel must not be dispatched on this device, or None if it may.
    ``cubin_arch``: the arch its cubin was built for (default: the device's)."""
    if not spec.arch_min <= device_arch <= spec.arch_max:
        return f"family arch range sm_{spec.arch_min}..sm_{spec.arch_max} excludes sm_{device_arch}"
    built = device_arch if cubin_arch is None else cubin_arch
    target = spec.mainloop.nvrtc_target(built)
    if target != f"sm_{built}" and built != device_arch:
        # NOTE: arch-specific code (sm_90a: wgmma, setmaxnreg) runs on that one arch only.
        return f"built for {target}, which runs only on sm_{built}"
    if spec.smem_bytes > smem_optin:
        return f"needs {spec.smem_bytes} B shared memory, device allows {smem_optin} B"
    if not spec.mma.native_on(device_arch) and not allow_emulated:
        return f"{spec.mma.value} MMA is emulated on sm_{device_arch} (pass allow_emulated=True to use it)"
    return None


class Registry:
    def __init__(self, device: DeviceInfo, kernels: list[Kernel], filtered: dict[str, str]) -> None:
        self.device = device
        self.kernels = kernels
        self.filtered = filtered  # name -> reason

    @classmethod
    def load(cls, device_index: int, build_dir: Path, allow_emulated: bool = False) -> "Registry":
        if type(allow_emulated) is not bool:  # a truthy "no" or 1 let the emulated kernels in
            raise GemmArgumentError("allow_emulated", repr(allow_emulated), "True or False")
        ensure_context(device_index)
        build_dir = Path(build_dir)
        device = DeviceInfo.query(device_index)
        available = [a for a, _ in build_manifest.arch_dirs(build_dir)]
        archs = compatible_cubin_archs(device.arch, available)
        if not archs and device.arch not in KNOWN_ARCHS:
            # NOTE: `make build` would skip it too: say so, not "run make build".
            raise NoKernelsError(
                f"this GPU (sm_{device.arch}) is not an arch this project builds kernels for "
                f"({', '.join(f'sm_{a}' for a in KNOWN_ARCHS)}); cubins of another major version do not run on it"
            )
        if not archs:
            raise NoKernelsError(
                f"{build_dir} holds no cubins for this GPU (sm_{device.arch}); it has "
                f"{', '.join(f'sm_{a}' for a in available) or 'nothing'}. Run `make build` "
                f"(or `python -m gemm_runtime.build --arch {device.arch}`) on this machine."
            )
        # A later (closer) arch overrides an earlier one, its damaged entries included.
        entries: dict[str, tuple[int, build_manifest.Record, bytes | None, str | None]] = {}
        for arch in archs:
            try:
                manifest, cubins, problems = build_manifest.read_verified(
                    build_dir / f"sm_{arch}" / build_manifest.MANIFEST, arch
                )
            except build_manifest.ManifestError as e:
                raise NoKernelsError(str(e)) from None
            bad = {p.name: p.describe() for p in problems}
            for rec in manifest.records:
                entries[rec.name] = (arch, rec, cubins.get(rec.name), bad.get(rec.name))

        kernels: list[Kernel] = []
        filtered: dict[str, str] = {}
        for name in sorted(entries):
            arch, rec, cubin, problem = entries[name]
            reason = filter_reason(rec.spec, device.arch, device.smem_optin, allow_emulated, arch)
            if reason is not None:
                filtered[name] = reason
                continue
            if problem is not None:
                # NOTE: skipped, not fatal: the other kernels still serve; `list` shows it.
                warnings.warn(problem, stacklevel=2)
                filtered[name] = problem
                continue
            function = LoadedFunction(cubin, rec.symbol, rec.spec.smem_bytes, rec.spec.threads, rec.spec.cluster)
            kernels.append(Kernel(rec.spec, arch, rec.registers, rec.spills, function, device.sms))
        if not kernels:
            raise NoKernelsError(
                f"none of the {len(entries)} kernels in {build_dir} may run on sm_{device.arch}: "
                + "; ".join(f"{n}: {r}" for n, r in list(filtered.items())[:5])
            )
        return cls(device, kernels, filtered)

    def get(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)
