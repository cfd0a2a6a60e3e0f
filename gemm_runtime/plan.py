"""What dispatch decides for one problem: which kernel, how many K splits, which
CTA rasterization. The dispatch cache stores these; the tuner measures them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class LaunchSpec:
    kernel: str  # the kernel's stable name (KernelSpec.name)
    splits: int = 1  # split-K: K cut into this many slices, summed in order by the last
    swizzle: int = 0  # CTAs rasterized in groups of 2**swizzle along N

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "splits": self.splits, "swizzle": self.swizzle}

    @classmethod
    def from_json(cls, data: dict) -> "LaunchSpec":
        kernel, splits, swizzle = data["kernel"], data.get("splits", 1), data.get("swizzle", 0)
        if not isinstance(kernel, str) or not kernel:
            raise TypeError(f"kernel must be a non-empty string, got {kernel!r}")
        for name, v, hi in (("splits", splits, 64), ("swizzle", swizzle, 5)):
            if not isinstance(v, int) or isinstance(v, bool) or not (0 if name == "swizzle" else 1) <= v <= hi:
                raise TypeError(f"{name} must be an integer in range, got {v!r}")
        return cls(kernel, splits, swizzle)
