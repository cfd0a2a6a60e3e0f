"""What dispatch decides for one problem: which kernel, how many K splits, which
CTA rasterization, and for a quantized weight whether it is first unpacked whole into a
dense buffer (a whole-weight plan, gemm_runtime/whole_weight.py). The dispatch cache
stores these; the tuner measures them."""

from __future__ import annotations

from dataclasses import dataclass

# The one source of both ranges; settings, the cost model, forced kernels and the cache
# file all read these.
# NOTE: 64 splits bound the workspace a tuned entry may ask for (the fp32 partials of
# 63 splits) and the tuner's search; more never pays for K sizes of LLM layers.
MAX_SPLITS = 64
# NOTE: the kernel takes the swizzle as a runtime shift (templates/include/gemm/kernel.cuh:
# tile_m = blockIdx.x >> swizzle), so any shift works as long as the grid stays in
# bounds; 0..5 (groups of up to 32 N tiles) covers every useful rasterization.
SWIZZLES = range(0, 6)


@dataclass(frozen=True, order=True)
class LaunchSpec:
    kernel: str  # the kernel's stable name (KernelSpec.name)
    splits: int = 1  # split-K: K cut into this many slices, summed in order by the last
    swizzle: int = 0  # CTAs rasterized in groups of 2**swizzle along N
    # A quantized weight unpacked into a dense buffer first, then ``kernel`` (a dense
    # kernel) on it: the whole-weight plans of prefill (gemm_runtime/whole_weight.py).
    unpack: bool = False

    def to_json(self) -> dict:
        out = {"kernel": self.kernel, "splits": self.splits, "swizzle": self.swizzle}
        if self.unpack:  # absent otherwise: the files of earlier versions read the same
            out["unpack"] = True
        return out

    def validate(self) -> None:
        """ValueError when a field is out of its range (types are the caller's: from_json)."""
        if not self.kernel:
            raise ValueError("kernel is an empty name")
        if not 1 <= self.splits <= MAX_SPLITS:
            raise ValueError(f"splits {self.splits} is not in 1..{MAX_SPLITS}")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"swizzle {self.swizzle} is not in {SWIZZLES[0]}..{SWIZZLES[-1]}")

    @classmethod
    def from_json(cls, data: dict) -> "LaunchSpec":
        """Inverse of to_json: KeyError for a missing field, TypeError for a value of the
        wrong JSON type, ValueError for one out of range (see validate)."""
        kernel, splits, swizzle = data["kernel"], data.get("splits", 1), data.get("swizzle", 0)
        unpack = data.get("unpack", False)
        if not isinstance(kernel, str):
            raise TypeError(f"kernel must be a string, got {kernel!r}")
        for name, v in (("splits", splits), ("swizzle", swizzle)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} must be an integer, got {v!r}")
        if not isinstance(unpack, bool):
            raise TypeError(f"unpack must be true or false, got {unpack!r}")
        spec = cls(kernel, splits, swizzle, unpack)
        spec.validate()
        return spec
