"""gemm_runtime.checkpoints: AWQ, GPTQ and compressed-tensors checkpoints from disk into a
tiny transformers Llama (CPU: the QuantLinear layers are built, not run), and
quant.from_compressed_tensors against the documented layout and the package's packer."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from gemm_runtime.checkpoints import CheckpointFiles, from_pretrained_quantized, load_quantized  # noqa: E402
from gemm_runtime.errors import (  # noqa: E402
    CheckpointError,
    CheckpointMismatchError,
    CheckpointWarning,
    GemmArgumentError,
)
from gemm_runtime.nn import QuantLinear  # noqa: E402
from gemm_runtime.quant import from_compressed_tensors, pack_int32, quantize  # noqa: E402
from tests.quant_checkpoints import (  # noqa: E402
    FORMATS,
    ct_tensors,
    linear_names,
    tiny_llama_config,
    tiny_model,
    write_checkpoint,
    write_tensors,
)


@pytest.fixture
def built(monkeypatch):
    """Records every QuantizedWeight (and bias) the loader hands to QuantLinear, so the test
    compares what it was built from without reading the layer's internals."""
    calls = {}
    original = QuantLinear.from_quantized.__func__

    def recording(cls, qw, bias=None, gemm=None):
        layer = original(cls, qw, bias, gemm)
        calls[id(layer)] = (qw, bias)
        return layer

    monkeypatch.setattr(QuantLinear, "from_quantized", classmethod(recording))
    return calls


def check_model(model, written, built):
    modules = dict(model.named_modules())
    assert set(written.quantized) == {n for n, m in modules.items() if isinstance(m, QuantLinear)}
    for name, expected in written.quantized.items():
        layer = modules[name]
        assert (layer.out_features, layer.in_features) == expected.shape
        qw, bias = built[id(layer)]
        assert torch.equal(qw.dequantize(torch.float32), expected.dequantize(torch.float32)), name
        assert torch.equal(qw.q, expected.q) and torch.equal(qw.zeros, expected.zeros), name
        assert (qw.bits, qw.group_size) == (expected.bits, expected.group_size)
        if name in written.biases:
            assert torch.equal(bias, written.biases[name]), name
        else:
            assert bias is None
    state = model.state_dict()
    for key, value in written.floats.items():
        assert state[key].dtype == value.dtype and torch.equal(state[key], value), key
    assert isinstance(modules["lm_head"], torch.nn.Linear)


@pytest.mark.parametrize("fmt", FORMATS)
def test_from_pretrained_quantized_every_format(tmp_path, built, fmt):
    # GPTQ with attention biases: the bias travels with the quantized layer.
    config = tiny_llama_config(attention_bias=fmt.startswith("gptq"))
    written = write_checkpoint(tmp_path, fmt, config=config)
    model = from_pretrained_quantized(tmp_path, device="cpu")
    assert not model.training
    check_model(model, written, built)
    if fmt == "gptq_act_order":
        assert all(built[id(dict(model.named_modules())[n])][0].g_idx is not None for n in written.quantized)


def test_load_quantized_into_a_model_sharded(tmp_path, built):
    written = write_checkpoint(tmp_path, "awq", shards=3)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert not (tmp_path / "model.safetensors").exists()
    model = tiny_model(tiny_llama_config(), seed=1)  # other random weights: all must be overwritten
    names = load_quantized(model, tmp_path)
    assert names == sorted(linear_names(model.config))
    check_model(model, written, built)
    # The index file itself is accepted as the path too.
    model = tiny_model(tiny_llama_config(), seed=2)
    assert load_quantized(model, tmp_path / "model.safetensors.index.json") == names


def test_not_converted_layers_stay_float(tmp_path, built):
    skip = ("model.layers.0.mlp.down_proj", "model.layers.1.self_attn.q_proj")
    for fmt in ("gptq", "ct_asym"):
        written = write_checkpoint(tmp_path / fmt, fmt, skip=skip)
        model = from_pretrained_quantized(tmp_path / fmt, device="cpu")
        check_model(model, written, built)
        for name in skip:
            layer = model.get_submodule(name)
            assert type(layer) is torch.nn.Linear
            assert torch.equal(layer.weight, written.floats[f"{name}.weight"])


def test_bf16_scales_into_an_fp16_model_and_dtype(tmp_path, built):
    written = write_checkpoint(tmp_path, "ct_sym")
    with open(tmp_path / "config.json") as f:
        config = json.load(f)
    tensors = dict(written.tensors)
    for key in [k for k in tensors if k.endswith("weight_scale")]:
        tensors[key] = tensors[key].to(torch.bfloat16)  # fp16 scales -> bf16: exact here (no tiny values)
    write_tensors(tmp_path, tensors)
    model = from_pretrained_quantized(tmp_path, device="cpu")
    assert config["quantization_config"]["format"] == "pack-quantized"
    for name in written.quantized:
        qw, _ = built[id(model.get_submodule(name))]
        assert qw.scales.dtype == torch.float16
        assert torch.equal(qw.scales, written.quantized[name].scales.to(torch.bfloat16).to(torch.float16))
    model = from_pretrained_quantized(tmp_path, device="cpu", dtype=torch.bfloat16)
    assert built[id(model.get_submodule(linear_names(model.config)[0]))][0].scales.dtype == torch.bfloat16


# --- errors -------------------------------------------------------------------------------------------


def rewrite(folder, written, drop=(), replace=None, add=None):
    tensors = {k: v for k, v in written.tensors.items() if k not in drop}
    tensors.update(replace or {})
    tensors.update(add or {})
    write_tensors(folder, tensors)


def set_quant_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["quantization_config"].update(changes)
    path.write_text(json.dumps(config))


Q = "model.layers.0.self_attn.q_proj"


def test_missing_quantized_tensor(tmp_path):
    written = write_checkpoint(tmp_path, "awq")
    rewrite(tmp_path, written, drop=(f"{Q}.scales",))
    message = r"model.safetensors, tensor .*q_proj.scales: missing: a awq linear needs"
    with pytest.raises(CheckpointError, match=message) as e:
        from_pretrained_quantized(tmp_path, device="cpu")
    assert e.value.tensor == f"{Q}.scales" and e.value.path.endswith("model.safetensors")
    # Act-order GPTQ needs g_idx; without act-order it may be absent.
    written = write_checkpoint(tmp_path, "gptq_act_order")
    rewrite(tmp_path, written, drop=(f"{Q}.g_idx",))
    with pytest.raises(CheckpointError, match=r"q_proj.g_idx"):
        from_pretrained_quantized(tmp_path, device="cpu")
    written = write_checkpoint(tmp_path, "gptq")
    rewrite(tmp_path, written, drop=[k for k in written.tensors if k.endswith(".g_idx")])
    from_pretrained_quantized(tmp_path, device="cpu")


def test_wrong_shapes(tmp_path):
    written = write_checkpoint(tmp_path, "gptq")
    scales = written.tensors[f"{Q}.scales"]
    rewrite(tmp_path, written, replace={f"{Q}.scales": scales[:-1].clone()})
    with pytest.raises(CheckpointError, match=r"tensor .*q_proj.scales: gptq linear .*scales: got shape") as e:
        from_pretrained_quantized(tmp_path, device="cpu")
    assert isinstance(e.value.__cause__, GemmArgumentError)
    # A quantized weight of another size than the model's linear.
    k_proj = "model.layers.0.self_attn.k_proj"
    suffixes = ("qweight", "qzeros", "scales", "g_idx")
    rewrite(tmp_path, written, replace={f"{Q}.{s}": written.tensors[f"{k_proj}.{s}"] for s in suffixes})
    with pytest.raises(CheckpointError, match=r"holds a \[32, 64\] weight .*q_proj is \[64, 64\]"):
        from_pretrained_quantized(tmp_path, device="cpu")
    # A float tensor: checked before the model changes.
    rewrite(tmp_path, written, replace={"model.norm.weight": torch.ones(63, dtype=torch.float16)})
    model = tiny_model(tiny_llama_config())
    with pytest.raises(CheckpointError, match=r"tensor model.norm.weight: shape \(63,\); the model's"):
        load_quantized(model, tmp_path)
    assert not any(isinstance(m, QuantLinear) for m in model.modules())


def test_missing_and_unexpected_float_tensors(tmp_path):
    written = write_checkpoint(tmp_path, "ct_asym")
    extra = {"model.layers.0.extra.weight": torch.zeros(3)}
    rewrite(tmp_path, written, drop=("model.embed_tokens.weight",), add=extra)
    model = tiny_model(tiny_llama_config())
    with pytest.raises(CheckpointMismatchError) as e:
        load_quantized(model, tmp_path)
    assert e.value.missing == ["model.embed_tokens.weight"]
    assert e.value.unexpected == ["model.layers.0.extra.weight"]
    assert "1 tensor(s) missing from the checkpoint: model.embed_tokens.weight" in str(e.value)
    assert not any(isinstance(m, QuantLinear) for m in model.modules())  # nothing changed
    with pytest.warns(CheckpointWarning, match="missing from the checkpoint"):
        names = load_quantized(model, tmp_path, strict=False)
    assert len(names) == len(written.quantized)


def test_config_errors(tmp_path):
    write_checkpoint(tmp_path, "awq")
    cases = [
        ({"quant_method": "bitsandbytes"},
         r"quant_method: got 'bitsandbytes'; accepted: 'awq', 'gptq', 'compressed-tensors'"),
        ({"bits": 8}, r"quantization_config.bits: got 8; accepted: 4"),
        ({"group_size": 16}, r"group_size: got 16; accepted: 32 or 64 or 128 or -1"),
        ({"version": "gemv"}, r"version: got 'gemv'"),
        ({"zero_point": False}, r"zero_point: got False"),
    ]
    for changes, message in cases:
        write_checkpoint(tmp_path, "awq")
        set_quant_config(tmp_path, **changes)
        with pytest.raises(CheckpointError, match=message) as e:
            from_pretrained_quantized(tmp_path, device="cpu")
        assert e.value.path.endswith("config.json")
    write_checkpoint(tmp_path, "gptq")
    set_quant_config(tmp_path, checkpoint_format="marlin")
    with pytest.raises(CheckpointError, match=r"checkpoint_format: got 'marlin'; accepted: \"gptq\" or \"gptq_v2\""):
        from_pretrained_quantized(tmp_path, device="cpu")
    write_checkpoint(tmp_path, "ct_sym")
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {"num_bits": 8}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"input_activations: .*weight-only"):
        from_pretrained_quantized(tmp_path, device="cpu")
    set_quant_config(tmp_path, format="float-quantized")
    with pytest.raises(CheckpointError, match=r"format: got 'float-quantized'"):
        from_pretrained_quantized(tmp_path, device="cpu")


@pytest.mark.parametrize(
    "fmt, changes, message",
    [
        # Values a dict lookup cannot hash: a JSON list or object where a name belongs.
        ("awq", {"quant_method": ["awq"]}, r"quant_method: got \['awq'\]; accepted: 'awq', 'gptq'"),
        ("awq", {"quant_method": {}}, r"quant_method: got \{\}; accepted: 'awq'"),
        ("gptq", {"checkpoint_format": ["gptq"]}, r"checkpoint_format: got \['gptq'\]; accepted: \"gptq\" or"),
        ("gptq", {"checkpoint_format": {"v": 2}}, r"checkpoint_format: got \{'v': 2\}; accepted: \"gptq\" or"),
        # compressed-tensors' "re:" patterns: compiled when the config is read.
        ("ct_sym", {"ignore": ["lm_head", "re:.*proj["]}, r"ignore: got 're:.*proj\['; accepted: \"re:\" and a valid"),
    ],
)
def test_malformed_config_values_are_named(tmp_path, fmt, changes, message):
    write_checkpoint(tmp_path, fmt)
    set_quant_config(tmp_path, **changes)
    model = tiny_model(tiny_llama_config())
    with pytest.raises(CheckpointError, match=message) as e:
        load_quantized(model, tmp_path)
    assert e.value.path.endswith("config.json")
    assert not any(isinstance(m, QuantLinear) for m in model.modules())


def test_a_bad_target_pattern_is_named(tmp_path):
    write_checkpoint(tmp_path, "ct_asym")
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = ["re:(*_proj"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config_groups.group_0.targets: got 're:\(\*_proj'; accepted: \"re:\""):
        load_quantized(tiny_model(tiny_llama_config()), tmp_path)


@pytest.mark.parametrize("path", [None, 3])
def test_the_path_argument_is_named(path):
    for call in (lambda: load_quantized(tiny_model(tiny_llama_config()), path),
                 lambda: from_pretrained_quantized(path, device="cpu")):
        with pytest.raises(GemmArgumentError, match=rf"^path: got {type(path).__name__}; accepted: a checkpoint"):
            call()


def test_quantized_tensors_for_an_ignored_or_missing_module(tmp_path):
    written = write_checkpoint(tmp_path, "ct_sym")
    set_quant_config(tmp_path, ignore=["lm_head", "re:.*q_proj$"])
    with pytest.raises(CheckpointError, match=r"q_proj.*keeps in float"):
        from_pretrained_quantized(tmp_path, device="cpu")
    rewrite(tmp_path, written, add={f"model.layers.9.mlp.up_proj.{s}": t for s, t in ct_tensors(
        quantize(torch.randn(8, 64, dtype=torch.float16), group_size=32)).items()})
    set_quant_config(tmp_path, ignore=["lm_head"])
    with pytest.raises(CheckpointError, match=r"layers.9.mlp.up_proj', which in the model is no such module"):
        from_pretrained_quantized(tmp_path, device="cpu")


def test_file_errors(tmp_path):
    with pytest.raises(CheckpointError, match="neither model.safetensors.index.json nor model.safetensors"):
        CheckpointFiles(tmp_path)
    written = write_checkpoint(tmp_path / "s", "awq", shards=2)
    (tmp_path / "s" / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002.safetensors, tensor .*: listed in the index"):
        from_pretrained_quantized(tmp_path / "s", device="cpu")
    write_checkpoint(tmp_path / "c", "awq")
    (tmp_path / "c" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot be read as safetensors"):
        from_pretrained_quantized(tmp_path / "c", device="cpu")
    model = tiny_model(tiny_llama_config())
    write_tensors(tmp_path / "n", written.tensors)  # no config.json, no model.config.quantization_config
    with pytest.raises(CheckpointError, match="no quantization_config"):
        load_quantized(model, tmp_path / "n")
    from tests.quant_checkpoints import quantization_config

    load_quantized(model, tmp_path / "n", quantization_config=quantization_config("awq"))


# --- from_compressed_tensors ------------------------------------------------------------------------


def test_compressed_tensors_hand_computed_words():
    # One row of K = 8: 4-bit codes 0..7 along K -> word 0x76543210; 8-bit codes along K, 4 per word.
    q = torch.arange(8, dtype=torch.uint8).reshape(1, 8)
    scale = torch.ones(1, 1, dtype=torch.float16)
    qw = from_compressed_tensors(torch.tensor([[0x76543210]], dtype=torch.int32), scale, (1, 8), group_size=-1)
    assert torch.equal(qw.q, q) and qw.symmetric and bool((qw.zeros == 8).all())
    qw = from_compressed_tensors(torch.tensor([[0x03020100, 0x07060504]], dtype=torch.int32), scale, (1, 8),
                                 bits=8, group_size=-1)
    assert torch.equal(qw.q, q) and bool((qw.zeros == 128).all())
    # Zero points packed along N (dim 0): N = 8 rows, zero of row n = n + 1 -> one word per group.
    packed = torch.zeros(8, 1, dtype=torch.int32)
    qw = from_compressed_tensors(packed, torch.ones(8, 1, dtype=torch.float16), torch.tensor([8, 8]),
                                 torch.tensor([[0x87654321 - (1 << 32)]], dtype=torch.int32), group_size=-1)
    assert qw.zeros.tolist() == [[float(n + 1) for n in range(8)]] and not qw.symmetric


@pytest.mark.parametrize("bits,group_size,symmetric", [(4, 32, True), (4, 64, False), (8, 128, False), (8, -1, True)])
def test_compressed_tensors_round_trip(bits, group_size, symmetric):
    w = torch.randn(40, 256, generator=torch.Generator().manual_seed(bits + group_size)).to(torch.float16)
    qw = quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)
    t = ct_tensors(qw)
    back = from_compressed_tensors(t["weight_packed"], t["weight_scale"], t["weight_shape"],
                                   t.get("weight_zero_point"), bits=bits, group_size=group_size)
    assert torch.equal(back.dequantize(), qw.dequantize()) and torch.equal(back.q, qw.q)
    assert back.symmetric == symmetric


def test_compressed_tensors_against_the_package():
    """The package's own pack_to_int32 (weights along K, zero points along N) gives the
    tensors from_compressed_tensors reads. Skipped where compressed-tensors is absent."""
    helpers = pytest.importorskip("compressed_tensors.compressors.pack_quantized.helpers")
    g = torch.Generator().manual_seed(7)
    for bits in (4, 8):
        n, k, group_size = 24, 96, 32  # N = 24: the zero points' last word is partly padding
        half = 1 << (bits - 1)
        signed = torch.randint(-half, half, (n, k), generator=g, dtype=torch.int8)
        zero_point = torch.randint(-half, half, (n, k // group_size), generator=g, dtype=torch.int8)
        scale = (torch.rand(n, k // group_size, generator=g) * 0.01 + 0.001).to(torch.float16)
        packed = helpers.pack_to_int32(signed, bits)
        packed_zp = helpers.pack_to_int32(zero_point, bits, packed_dim=0)
        assert torch.equal(packed, pack_int32((signed.to(torch.int32) + half).to(torch.uint8), bits))
        qw = from_compressed_tensors(packed, scale, torch.tensor([n, k]), packed_zp, bits=bits, group_size=group_size)
        g_of = torch.arange(k) // group_size
        expected = (signed.float() - zero_point.float()[:, g_of]) * scale.float()[:, g_of]
        assert torch.equal(qw.dequantize(torch.float32), expected)


def test_compressed_tensors_errors():
    qw = quantize(torch.randn(16, 64, dtype=torch.float16), group_size=32)
    t = ct_tensors(qw)
    args = (t["weight_packed"], t["weight_scale"], t["weight_shape"], t["weight_zero_point"])
    with pytest.raises(GemmArgumentError, match=r"weight_packed: got shape \(16, 8\); accepted: shape \(16, 10\)"):
        from_compressed_tensors(*args[:2], (16, 80), args[3], group_size=-1)
    with pytest.raises(GemmArgumentError, match=r"weight_scale: got shape \(16, 2\); accepted: shape \(16, 1\)"):
        from_compressed_tensors(*args, group_size=64)
    with pytest.raises(GemmArgumentError, match=r"weight_zero_point: got shape \(4, 2\); accepted: shape \(2, 2\)"):
        from_compressed_tensors(*args[:3], torch.cat([args[3], args[3]], dim=0), group_size=32)
    with pytest.raises(GemmArgumentError, match=r"weight_shape: got \(16, 64, 1\)"):
        from_compressed_tensors(*args[:2], (16, 64, 1), group_size=32)
    with pytest.raises(GemmArgumentError, match=r"weight_shape: got tensor dtype=torch.float32"):
        from_compressed_tensors(*args[:2], torch.tensor([16.0, 64.0]), group_size=32)
    with pytest.raises(GemmArgumentError, match=r"weight_scale: got tensor dtype=torch.float32"):
        from_compressed_tensors(args[0], args[1].float(), args[2], group_size=32)
    with pytest.raises(GemmArgumentError, match=r"bits: got 2"):
        from_compressed_tensors(*args, bits=2, group_size=32)
