"""Quantized checkpoints loaded into a CUDA fp16 model: one forward's logits against the
same model holding each linear's dequantized weight in fp16 (QuantLinear runs on Gemm)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu

pytest.importorskip("transformers")
pytest.importorskip("safetensors")


@pytest.mark.parametrize("fmt", __import__("tests.quant_checkpoints", fromlist=["FORMATS"]).FORMATS)
def test_logits_match_the_dequantized_model(tmp_path, gemm, fmt):
    from gemm_runtime.checkpoints import from_pretrained_quantized
    from gemm_runtime.nn import QuantLinear
    from tests.quant_checkpoints import tiny_llama_config, tiny_model, write_checkpoint

    config = tiny_llama_config(attention_bias=fmt.startswith("gptq"))
    written = write_checkpoint(tmp_path, fmt, config=config)
    model = from_pretrained_quantized(tmp_path, device="cuda", gemm=gemm)
    assert sum(isinstance(m, QuantLinear) for m in model.modules()) == len(written.quantized)
    reference = tiny_model(config, device="cuda")
    reference.load_state_dict({k: v.cuda() for k, v in written.reference_state_dict().items()})
    ids = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0)).cuda()
    with torch.no_grad():
        logits = model(ids).logits
        expected = reference(ids).logits
    assert rel_err(logits, expected.float()) < 1e-2, fmt
