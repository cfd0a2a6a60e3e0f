"""Registry.load's refusals before any cubin is loaded, on the CPU (the device's
attributes stood in): a build without cubins for the GPU's arch says to build them, and
a GPU of an arch the project does not target says that instead (building would skip it)."""

from __future__ import annotations

import pytest

from gemm_runtime import registry
from gemm_runtime.errors import GemmArgumentError, NoKernelsError


def _load(tmp_path, monkeypatch, device_arch: int, built: list[int]):
    for arch in built:
        (tmp_path / f"sm_{arch}").mkdir()
        (tmp_path / f"sm_{arch}" / "manifest.json").write_text("{}")
    monkeypatch.setattr(registry, "ensure_context", lambda index: None)
    monkeypatch.setattr(registry.DeviceInfo, "query",
                        classmethod(lambda cls, index: cls(index, device_arch, 100, 232448)))  # fmt: skip
    return registry.Registry.load(0, tmp_path)


def test_a_build_for_other_archs_says_to_build_for_this_one(tmp_path, monkeypatch):
    with pytest.raises(NoKernelsError, match=r"holds no cubins for this GPU \(sm_75\); it has sm_80, sm_90\. Run"):
        _load(tmp_path, monkeypatch, 75, [80, 90])


def test_an_arch_the_project_does_not_target_is_named(tmp_path, monkeypatch):
    with pytest.raises(NoKernelsError, match=r"this GPU \(sm_100\) is not an arch this project builds kernels for "
                                             r"\(sm_70, .*sm_90\)"):  # fmt: skip
        _load(tmp_path, monkeypatch, 100, [80, 90])


@pytest.mark.parametrize("value", ["no", 1, None, "False"])
def test_allow_emulated_is_a_bool(tmp_path, monkeypatch, value):
    """A truthy non-bool ("no", 1) admitted the emulated kernels (m8n8k4 on sm_80+), silently."""
    from gemm_runtime import Gemm

    monkeypatch.setattr(registry, "ensure_context", lambda index: None)
    with pytest.raises(GemmArgumentError) as info:
        registry.Registry.load(0, tmp_path, value)
    assert info.value.argument == "allow_emulated"
    with pytest.raises(GemmArgumentError) as info:
        Gemm(allow_emulated=value)
    assert info.value.argument == "allow_emulated"
