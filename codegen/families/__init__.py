"""The mainloop families: a registry of ``MainloopFamily`` plug-ins by YAML name.

    from codegen.families import Mainloop, get, register
    Mainloop.SM80                      # the built-in families by name
    register(MyFamily())               # a new one (docs/EXTENDING.md)
"""

from __future__ import annotations

from codegen.families.base import MainloopFamily, TensorMapBox
from codegen.families.sm70 import Sm70Family
from codegen.families.sm80 import (
    Sm80Family,
    Sm80RingFamily,
    Sm80Rows8Family,
    Sm80StagedFamily,
    Sm80XorRowsFamily,
)
from codegen.families.sm90 import Sm90Family
from codegen.families.sm90_quant import Sm90QuantFamily, Sm90QuantSmemFamily

_FAMILIES: dict[str, MainloopFamily] = {}


def register(family: MainloopFamily) -> MainloopFamily:
    """Make ``family`` available to YAML configs, specs and the runtime by its value."""
    if not isinstance(family, MainloopFamily):
        raise TypeError(f"{family!r} is not a codegen.families.MainloopFamily")
    if family.value in _FAMILIES and _FAMILIES[family.value] is not family:
        raise ValueError(f"a mainloop family named {family.value!r} is registered already")
    _FAMILIES[family.value] = family
    return family


def unregister(value: str) -> None:
    """Remove a family (tests that register a fake one)."""
    _FAMILIES.pop(value, None)


def get(value: object) -> MainloopFamily:
    """The family of a YAML name, or ValueError listing the registered ones."""
    family = _FAMILIES.get(value) if isinstance(value, str) else None
    if family is None:
        raise ValueError(f"{value!r} is not one of {', '.join(repr(v) for v in _FAMILIES)}")
    return family


def families() -> list[MainloopFamily]:
    """Every registered family, in registration order."""
    return list(_FAMILIES.values())


class Mainloop:
    """The built-in families by name (``Mainloop.SM80 is get("sm80")``)."""

    SM80 = register(Sm80Family())
    SM70 = register(Sm70Family())
    SM90 = register(Sm90Family())
    SM90_QUANT = register(Sm90QuantFamily())
    SM90_QUANT_SMEM = register(Sm90QuantSmemFamily())
    SM80_STAGED = register(Sm80StagedFamily())
    SM80_RING = register(Sm80RingFamily())
    SM80_XOR = register(Sm80XorRowsFamily())
    SM80_ROWS8 = register(Sm80Rows8Family())


__all__ = ["MainloopFamily", "Mainloop", "TensorMapBox", "families", "get", "register", "unregister"]
