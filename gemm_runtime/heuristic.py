"""A first kernel-selection rule: predicted time from waves of CTAs and padded MMA work.
Deliberately simple; measured dispatch replaces it where it matters."""

from __future__ import annotations

import math

from codegen.spec import KernelSpec
from gemm_runtime.context import ProblemKey

# Lower-alignment kernels move data in narrower pieces; keep them as a last resort.
_ALIGN_PENALTY = {8: 1.0, 4: 1.5, 2: 3.0, 1: 8.0}


def predicted_cost(spec: KernelSpec, ctas_per_sm: int, sms: int, key: ProblemKey) -> float:
    cm, cn, ck = spec.cta
    tiles = math.ceil(key.m / cm) * math.ceil(key.n / cn)
    resident = max(1, ctas_per_sm)
    waves = math.ceil(tiles / (sms * resident))
    # Work one SM does per wave: its resident CTAs' padded tiles.
    per_sm = min(resident, math.ceil(tiles / sms))
    padded_k = max(1, math.ceil(key.k / ck)) * ck
    work = per_sm * cm * cn * padded_k
    # Thin tiles re-read operands from shared memory more per MMA: lower efficiency.
    intensity = cm * cn / (cm + cn)
    efficiency = intensity / (intensity + 48.0)
    # Two stages leave no copy in flight while the MMAs of a tile run.
    depth = 1.5 if spec.stages < 3 else 1.0
    return waves * work / efficiency * depth * _ALIGN_PENALTY[spec.align]
