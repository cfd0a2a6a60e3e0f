"""bench.tp_mlp on the CPU: two gloo ranks, a small MLP, fp16 and W4A16, checked against
the single-process MLP by the script itself (it exits where they differ)."""

from __future__ import annotations

import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank: int, path: str, out: str) -> None:
    from bench.tp_mlp import main

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    try:
        lines = main(["--cpu", "--hidden", "256", "--intermediate", "512", "--tokens", "1", "7", "--reps", "2",
                      "--out", out])  # fmt: skip
        if rank == 0:
            assert len(lines) == 2 + 2 * 2, lines  # header + fp16 and W4A16 at two token counts
    finally:
        dist.destroy_process_group()


def test_the_tp_mlp_matches_one_process_on_two_cpu_ranks(tmp_path) -> None:
    out = tmp_path / "tp_mlp.md"
    mp.spawn(_rank, args=(str(tmp_path / "rendezvous"), str(out)), nprocs=2, join=True)
    rows = out.read_text().splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == ["fp16", "fp16", "W4A16 g128", "W4A16 g128"]
