"""Mainloop families are plug-ins: a fake one registered here is accepted by the YAML
loader, validated by its own rules, named, serialized and pickled by name, ranked by
its own cost terms, compiled for its own target and filtered by the registry, with no
change anywhere else."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from codegen import families
from codegen.config import ConfigError, load_configs
from codegen.families import Mainloop, MainloopFamily
from codegen.spec import KernelSpec
from codegen.vocabulary import MmaAtom
from gemm_runtime import compiler
from gemm_runtime.context import make_key
from gemm_runtime.cost_model import DeviceModel, predict
from gemm_runtime.registry import filter_reason
from tests.helpers import spec_for


class _FakeFamily(MainloopFamily):
    value = "fake90"
    min_arch = 90
    atoms = (MmaAtom.M16N8K16,)
    header = "gemm/kernel_sm80.cuh"
    entry = "gemm::gemm_sm80"

    def tile_error(self, cta, warps, stages, cluster=1):
        return None if stages == 3 else ("stages", "3 (the fake family's ring)")

    def nvrtc_target(self, arch: int) -> str:
        return f"sm_{arch}a"

    def mma_efficiency(self, spec) -> float:
        return 0.25


@pytest.fixture
def fake():
    family = families.register(_FakeFamily())
    yield family
    families.unregister(family.value)


_YAML = """
families:
  - name: plug
    arch: [90, 90]
    mainloop: fake90
    mma: m16n8k16
    a_type: f16
    b_type: f16
    acc_type: f32
    d_types: [f16]
    b_orders: [nk]
    align: [8]
    tiles:
      - {cta: [64, 64, 32], warps: [2, 2, 1], stages: STAGES}
"""


def _load(tmp_path: Path, stages: int):
    path = tmp_path / "plug.yaml"
    path.write_text(_YAML.replace("STAGES", str(stages)))
    return load_configs([path])


def test_the_loader_takes_a_registered_family_and_its_rules(fake, tmp_path):
    (k,) = _load(tmp_path, 3)
    assert k.spec.mainloop is fake and "_fake90_" in k.spec.name
    with pytest.raises(ConfigError, match=r"field 'stages': got 4, accepted: 3 \(the fake family's ring\)"):
        _load(tmp_path, 4)


def test_unknown_families_are_refused_with_the_registered_ones(tmp_path):
    with pytest.raises(ConfigError, match="'sm80', 'sm70'"):
        _load(tmp_path, 3)  # fake90 is not registered here


def test_specs_round_trip_by_family_name(fake):
    spec = spec_for(mainloop=fake, stages=3)
    assert KernelSpec.from_json(spec.to_json()) == spec
    assert spec.to_json()["mainloop"] == "fake90"
    assert pickle.loads(pickle.dumps(spec)).mainloop is fake  # build workers get the same instance
    assert pickle.loads(pickle.dumps(Mainloop.SM80)) is Mainloop.SM80


def test_the_cost_model_asks_the_family(fake):
    key = make_key(spec_for().a_type, spec_for().b_order, spec_for().d_type, 4096, 4096, 4096, arch=90)
    device = DeviceModel.of(90, 132, 1980000, 2619000, 6144)
    sm80 = spec_for(cta=(128, 128, 64), stages=3)  # rate 64 / 112 (K 32 on padded rows: 0.8 of it)
    slower = dataclasses.replace(sm80, mainloop=fake)
    assert predict(slower, 1, device, key) > 2 * predict(sm80, 1, device, key)


def test_the_build_compiles_for_the_family_target(fake):
    spec = spec_for(mainloop=fake, stages=3)
    opts = compiler.compile_options(90, [], (), spec.mainloop.nvrtc_target(90))
    assert opts[0] == "--gpu-architecture=sm_90a"
    assert compiler.compile_options(90, [])[0] == "--gpu-architecture=sm_90"


def test_the_registry_loads_arch_specific_cubins_only_on_their_arch(fake):
    spec = spec_for(mainloop=fake, stages=3, arch_min=90, arch_max=99)
    assert filter_reason(spec, 90, 232448, False, cubin_arch=90) is None
    assert "runs only on sm_90" in filter_reason(spec, 91, 232448, False, cubin_arch=90)
    plain = spec_for(arch_min=80, arch_max=99)
    assert filter_reason(plain, 91, 232448, False, cubin_arch=90) is None


def test_register_refuses_a_second_family_of_one_name():
    with pytest.raises(ValueError, match="registered already"):
        families.register(type("Again", (MainloopFamily,), {"value": "sm80"})())
    with pytest.raises(TypeError):
        families.register(object())


def test_a_family_says_whether_it_reads_a_by_tma(fake):
    """The one answer grouped launches (sort gathered rows first) and the cost model ask."""
    from codegen.families.base import TensorMapBox

    assert not Mainloop.SM80.reads_a_by_tma(spec_for()) and not fake.reads_a_by_tma(spec_for())
    hopper = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 128, 64), warps=(8, 1, 1), stages=4,
                      arch_min=90, arch_max=90)  # fmt: skip
    assert Mainloop.SM90.reads_a_by_tma(hopper)
    # A family whose maps describe other operands only does not.
    fake.tensor_maps = lambda spec, key=None: (TensorMapBox("b", 64, 64),)
    assert not fake.reads_a_by_tma(spec_for())
