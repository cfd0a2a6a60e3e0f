"""Writers of tiny quantized checkpoints (AWQ, GPTQ, compressed-tensors) for the loader's
tests, CPU and GPU. Each packer is written from the format's documented layout
(docs/QUANT.md), in the inverse direction of quant.from_awq / from_gptq /
from_compressed_tensors, with quant.pack_int32 as the one little-endian packer; what
pack_int32 itself does is checked by tests/runtime/test_quant.py against plain loops,
and the compressed-tensors layout against that package's own packer where installed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gemm_runtime.quant import AWQ_ORDER, QuantizedWeight, pack_int32, quantize

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def tiny_llama_config(**overrides):
    from transformers import LlamaConfig

    fields = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False, max_position_embeddings=64)
    fields.update(overrides)
    return LlamaConfig(**fields)


def tiny_model(config, dtype=torch.float16, device="cpu", seed=0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def linear_names(config) -> list[str]:
    return [f"model.layers.{i}.{n}" for i in range(config.num_hidden_layers) for n in LINEARS]


# --- the packers, one per format --------------------------------------------------------------------


def awq_tensors(qw: QuantizedWeight) -> dict[str, torch.Tensor]:
    """qweight [K, N/8] and qzeros [G, N/8]: nibble i of word j holds column 8j + AWQ_ORDER[i]."""
    n = qw.q.shape[0]
    columns = torch.tensor([8 * j + AWQ_ORDER[i] for j in range(n // 8) for i in range(8)])
    return {
        "qweight": pack_int32(qw.q.t().contiguous()[:, columns], 4),
        "qzeros": pack_int32(qw.zeros.to(torch.uint8)[:, columns], 4),
        "scales": qw.scales.clone(),
    }


def gptq_tensors(qw: QuantizedWeight, zero_point_offset: int) -> dict[str, torch.Tensor]:
    """qweight [K*bits/32, N] packed along K, qzeros [G, N*bits/32] packed along N holding
    zero - offset, g_idx [K] (k // group_size unless act-order)."""
    stored = qw.zeros.to(torch.int32) - zero_point_offset
    assert int(stored.min()) >= 0, "a zero of 0 cannot be stored in the classic format"
    return {
        "qweight": pack_int32(qw.q, qw.bits).t().contiguous(),
        "qzeros": pack_int32(stored.to(torch.uint8), qw.bits),
        "scales": qw.scales.clone(),
        "g_idx": qw.group_index().to(torch.int32),
    }


def ct_tensors(qw: QuantizedWeight) -> dict[str, torch.Tensor]:
    """compressed-tensors pack-quantized: weight_packed [N, K*bits/32] along K, weight_scale
    [N, G], weight_shape (N, K), and for asymmetric weight_zero_point [N*bits/32, G] packed
    along N (dim 0). Signed values are stored plus 2**(bits-1), which is our unsigned q."""
    out = {
        "weight_packed": pack_int32(qw.q, qw.bits),
        "weight_scale": qw.scales.t().contiguous(),
        "weight_shape": torch.tensor(qw.shape, dtype=torch.int64),
    }
    if not qw.symmetric:
        out["weight_zero_point"] = pack_int32(qw.zeros.to(torch.uint8), qw.bits).t().contiguous()
    if qw.g_idx is not None:
        out["weight_g_idx"] = qw.g_idx.clone()
    return out


def act_order(qw: QuantizedWeight, seed: int) -> QuantizedWeight:
    """The same groups with K shuffled: row k of the result is row perm[k], so g_idx is a
    permutation of k // group_size (what a desc_act checkpoint stores)."""
    k = qw.q.shape[1]
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(seed))
    g_idx = qw.group_index()[perm].to(torch.int32)
    return QuantizedWeight(qw.q[:, perm].contiguous(), qw.scales, qw.zeros, qw.bits, qw.group_size,
                           qw.symmetric, g_idx)


# --- a whole checkpoint -------------------------------------------------------------------------------


@dataclass
class Written:
    """What a writer put on disk: the canonical weight of every quantized linear, the float
    tensors, and the folder."""

    folder: Path
    quantized: dict[str, QuantizedWeight]
    biases: dict[str, torch.Tensor]
    floats: dict[str, torch.Tensor]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def reference_state_dict(self, dtype=torch.float16) -> dict[str, torch.Tensor]:
        """The float model the checkpoint stands for: each linear's weight dequantized."""
        sd = dict(self.floats)
        for name, qw in self.quantized.items():
            sd[f"{name}.weight"] = qw.dequantize(torch.float32).to(dtype)
            if name in self.biases:
                sd[f"{name}.bias"] = self.biases[name]
        return sd


FORMATS = ("awq", "gptq", "gptq_v2", "gptq_act_order", "gptq_8bit", "ct_sym", "ct_asym", "ct_8bit_channel")


def quantization_config(fmt: str, *, group_size: int = 32, ignore: list[str] | None = None) -> dict:
    if fmt == "awq":
        return {"quant_method": "awq", "version": "gemm", "bits": 4, "group_size": group_size, "zero_point": True,
                "modules_to_not_convert": ignore}
    if fmt.startswith("gptq"):
        return {"quant_method": "gptq", "bits": 8 if fmt == "gptq_8bit" else 4, "group_size": group_size,
                "desc_act": fmt == "gptq_act_order", "sym": False,
                "checkpoint_format": "gptq_v2" if fmt == "gptq_v2" else "gptq", "modules_to_not_convert": ignore}
    bits, strategy = (8, "channel") if fmt == "ct_8bit_channel" else (4, "group")
    weights = {"num_bits": bits, "type": "int", "symmetric": fmt == "ct_sym", "strategy": strategy,
               "group_size": group_size if strategy == "group" else None, "dynamic": False, "actorder": None}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None}},
            "ignore": ["lm_head"] + (ignore or [])}


def write_checkpoint(folder: Path, fmt: str, *, config=None, group_size: int = 32, shards: int = 1,
                     seed: int = 0, skip: tuple[str, ...] = ()) -> Written:
    """A tiny Llama with every decoder linear quantized in ``fmt`` (lm_head, embeddings and
    norms in fp16), written to ``folder`` with config.json. ``skip``: linears left in fp16
    and named in the config's not-convert list."""
    config = config or tiny_llama_config()
    model = tiny_model(config, seed=seed)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    bits = 8 if fmt in ("gptq_8bit", "ct_8bit_channel") else 4
    gs = -1 if fmt == "ct_8bit_channel" else group_size
    quantized, biases, tensors = {}, {}, {}
    for i, name in enumerate(linear_names(config)):
        if name in skip:
            continue
        weight = state.pop(f"{name}.weight")
        qw = quantize(weight, bits=bits, group_size=gs, symmetric=fmt == "ct_sym")
        if fmt == "gptq_act_order":
            qw = act_order(qw, seed=seed + i)
        if fmt == "awq":
            packed = awq_tensors(qw)
        elif fmt.startswith("gptq"):
            packed = gptq_tensors(qw, 0 if fmt == "gptq_v2" else 1)
        else:
            packed = ct_tensors(qw)
        tensors.update({f"{name}.{s}": t for s, t in packed.items()})
        if f"{name}.bias" in state:  # stored under its own name, next to the quantized tensors
            biases[name] = tensors[f"{name}.bias"] = state.pop(f"{name}.bias")
        quantized[name] = qw
    tensors.update(state)
    write_tensors(folder, tensors, shards)
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(folder))
    config_json = json.loads((folder / "config.json").read_text())
    config_json["quantization_config"] = quantization_config(fmt, group_size=group_size, ignore=list(skip) or None)
    (folder / "config.json").write_text(json.dumps(config_json, indent=2))
    return Written(folder, quantized, biases, state, tensors)


def write_tensors(folder: Path, tensors: dict[str, torch.Tensor], shards: int = 1) -> None:
    """model.safetensors, or ``shards`` files and model.safetensors.index.json."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for old in list(folder.glob("model*.safetensors")) + list(folder.glob("*.index.json")):
        old.unlink()
    tensors = {k: v.contiguous().clone() for k, v in tensors.items()}  # a test may reuse one tensor twice
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
             "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
