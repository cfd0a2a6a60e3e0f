"""bench/decode_chain.py without a GPU: the layer chains it builds from bench/shapes.yaml
are consistent (gate_up's gated output is down's input), and the int4 peer's weight
bytes are its nibbles and its (scale, zero) pairs."""

from __future__ import annotations

import pytest
import yaml

from bench import decode_chain


def _full_models() -> list[str]:
    models = yaml.safe_load((decode_chain.ROOT / "bench" / "shapes.yaml").read_text())["models"]
    return [name for name, layers in models.items() if set(decode_chain.LAYERS) <= set(layers)]


@pytest.mark.parametrize("model", _full_models())
def test_every_full_model_chains(model: str) -> None:
    shapes = decode_chain.layer_shapes(model)
    assert list(shapes) == list(decode_chain.LAYERS)
    hidden = shapes["qkv"][1]
    assert shapes["gate_up"][1] == hidden and shapes["down"][0] == hidden == shapes["o"][0]
    assert shapes["gate_up"][0] == 2 * shapes["down"][1]


def test_the_chain_covers_the_models_asked_for() -> None:
    assert {"llama3-8b", "llama3-70b"} <= set(_full_models())


def test_int4_weight_bytes() -> None:
    # 4096 x 4096: 8 MiB of nibbles and 32 groups x 4096 rows of two bf16.
    assert decode_chain.int4_weight_bytes(4096, 4096) == 4096 * 2048 + 32 * 4096 * 4
