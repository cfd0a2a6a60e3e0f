"""Tuning shared across the ranks of a tensor-parallel group (docs/PARALLEL.md): each rank
measures every world_size-th problem of the plan on its own GPU, then the ranks exchange
their dispatch caches as the JSON exports (torch.distributed.all_gather_object) and each
imports all of them in rank order, so a group of N tunes about N times faster than one
GPU and every rank ends with the same cache. The ranks' GPUs are assumed alike (one
node); an import checks every record against the rank's build like any other."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch.distributed as dist

from gemm_runtime.parallel import rank_and_world

T = TypeVar("T")


def share_of(plan: Sequence[T], rank: int, world: int) -> list[T]:
    """The problems rank ``rank`` tunes: every ``world``-th one from its own index, so
    each rank gets about as many of each layer's Ms (small and large alike)."""
    return list(plan[rank::world])


def merge_exports(gemm: Any, texts: Sequence[str]) -> list[Any]:
    """Import each export (``to_json_text`` of a rank's cache) into ``gemm``'s cache, in
    order: a key two ranks both recorded takes the later rank's decision on every rank
    alike. Returns the import reports."""
    return [gemm.import_cache(io.StringIO(text)) for text in texts]


def exchange_caches(gemm: Any, group=None) -> list[Any]:
    """Gather every rank's dispatch cache and merge them all into each rank's."""
    _, world = rank_and_world(group)
    texts: list[Any] = [None] * world
    dist.all_gather_object(texts, gemm.cache.to_json_text(), group=group)
    return merge_exports(gemm, texts)


def tune_across_ranks(
    gemm: Any, plan: Sequence[Any], *, dtype: str, out_path: str | Path | None = None, group=None,
    progress: bool = False,
) -> int:  # fmt: skip
    """Tune the rank's share of ``plan`` (``__main__.tuning_plan``'s problems) on its Gemm,
    exchange the caches, and (rank 0) write the merged cache to ``out_path``. Returns
    run_tuning's status for the rank's share (1 if a problem failed)."""
    from gemm_runtime.__main__ import check_tune_dtype, run_tuning

    check_tune_dtype(dtype)  # on every rank before any collective, like rank_and_world
    rank, world = rank_and_world(group)
    with tempfile.TemporaryDirectory() as tmp:
        status = run_tuning(gemm, share_of(plan, rank, world), dtype=dtype, out_path=Path(tmp) / f"rank{rank}.json",
                            progress=progress)  # fmt: skip
    exchange_caches(gemm, group)
    if out_path is not None and rank == 0:
        gemm.export_cache(out_path)
    return status
