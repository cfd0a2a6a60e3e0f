"""Quantized checkpoints from disk into a model in one call: the AWQ, GPTQ and
compressed-tensors ("pack-quantized") safetensors checkpoints of the Hugging Face hub.

    model = from_pretrained_quantized("path/to/Llama-3-8B-AWQ")     # config.json -> model
    names = load_quantized(model, "path/to/checkpoint")            # an existing model

``config.json``'s ``quantization_config`` says the format; the checkpoint's tensors say
which linears are quantized. Each becomes a ``QuantLinear`` built from its tensors, and
every other tensor (embeddings, norms, an unquantized lm_head) is copied into the model
with ``load_state_dict(strict=True)`` semantics. Tensors are read lazily, one at a time,
and moved to the device of the model tensor they replace. transformers is imported only
by ``from_pretrained_quantized``; safetensors by both. Layouts: docs/QUANT.md.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from gemm_runtime.errors import (
    CheckpointError,
    CheckpointMismatchError,
    CheckpointWarning,
    GemmArgumentError,
)
from gemm_runtime.quant import BITS, GROUP_SIZES, PER_CHANNEL, SCALE_DTYPES, QuantizedWeight

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


# --- the files ------------------------------------------------------------------------------------


class CheckpointFiles:
    """The tensors of one checkpoint, ``model.safetensors`` or shards listed by
    ``model.safetensors.index.json``, read lazily by name (``safe_open``, CPU)."""

    def __init__(self, path: str | Path) -> None:
        from safetensors import safe_open

        self._safe_open = safe_open
        path = Path(path)
        if path.is_dir():
            index, single = path / INDEX_FILE, path / SINGLE_FILE
            if not index.is_file() and not single.is_file():
                raise CheckpointError(path, f"neither {INDEX_FILE} nor {SINGLE_FILE} in this folder")
            path = index if index.is_file() else single
        elif not path.is_file():
            raise CheckpointError(path, "no such file or folder")
        self.path = path
        self.folder = path.parent
        self._handles: dict[Path, object] = {}
        if path.name.endswith(".json"):
            self._file_of = self._read_index(path)
        else:
            self._file_of = dict.fromkeys(self._open(path).keys(), path)

    def _read_index(self, path: Path) -> dict[str, Path]:
        try:
            weight_map = json.loads(path.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(path, f"not a safetensors index with a weight_map ({e})") from e
        if not isinstance(weight_map, dict):
            raise CheckpointError(path, f"weight_map is a {type(weight_map).__name__}; accepted: an object")
        files = {}
        for name, file in weight_map.items():
            shard = self.folder / str(file)
            if not shard.is_file():
                raise CheckpointError(shard, "listed in the index's weight_map but not on disk", tensor=name)
            files[name] = shard
        return files

    def _open(self, file: Path):
        handle = self._handles.get(file)
        if handle is None:
            try:
                handle = self._handles[file] = self._safe_open(str(file), framework="pt", device="cpu")
            except Exception as e:  # safetensors raises its own types for a corrupt header
                raise CheckpointError(file, f"cannot be read as safetensors ({e})") from e
        return handle

    def keys(self) -> list[str]:
        return list(self._file_of)

    def __contains__(self, name: str) -> bool:
        return name in self._file_of

    def file_of(self, name: str) -> Path:
        return self._file_of[name]

    def _checked(self, name: str):
        file = self._file_of[name]
        handle = self._open(file)
        if name not in handle.keys():
            raise CheckpointError(file, f"listed in {self.path.name} but absent from this file", tensor=name)
        return handle

    def shape(self, name: str) -> tuple[int, ...]:
        """Without reading the data."""
        return tuple(self._checked(name).get_slice(name).get_shape())

    def get(self, name: str, device: torch.device | str = "cpu") -> torch.Tensor:
        return self._checked(name).get_tensor(name).to(device)


def read_config(folder: str | Path) -> dict:
    path = Path(folder) / CONFIG_FILE
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise CheckpointError(path, "no config.json beside the checkpoint (pass quantization_config=)") from e
    except (OSError, ValueError) as e:
        raise CheckpointError(path, f"not valid JSON ({e})") from e
    if not isinstance(config, dict):
        raise CheckpointError(path, f"a JSON {type(config).__name__}; accepted: an object")
    return config


# --- the formats ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearScheme:
    """How one linear is stored: what the format's converter needs besides the tensors."""

    bits: int
    group_size: int  # rows of K, or -1 (per channel)


class _Format:
    """One quant_method: which tensors a quantized linear has (``suffixes``, the first
    always present), which linears the config keeps in float, and the conversion."""

    method: str
    suffixes: tuple[str, ...]
    optional: tuple[str, ...] = ()

    def __init__(self, config: dict, source: str) -> None:
        self.config = config
        self.source = source

    def _error(self, key: str, given: object, accepted: str) -> CheckpointError:
        return CheckpointError(self.source, f"quantization_config.{key}: got {given!r}; accepted: {accepted}")

    def _int(self, keys: tuple[str, ...], accepted: tuple[int, ...], default: int | None = None) -> int:
        key = next((k for k in keys if k in self.config), keys[0])
        value = self.config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value not in accepted:
            raise self._error(key, value, " or ".join(map(str, accepted)))
        return value

    def _names(self, key: str) -> list[str]:
        names = self.config.get(key) or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise self._error(key, names, "a list of module names, or null")
        return names

    def _patterns(self, key: str, names: list[str]) -> None:
        """Each "re:" entry of ``names`` (compressed-tensors' targets and ignore) compiles."""
        for name in names:
            if name.startswith("re:"):
                try:
                    re.compile(name[3:])
                except re.error as e:
                    raise self._error(key, name, f'"re:" and a valid Python regular expression ({e})') from None

    def keeps_float(self, name: str, class_name: str) -> bool:
        """True: the config says this linear is not quantized."""
        raise NotImplementedError

    def scheme(self, name: str, class_name: str) -> LinearScheme:
        raise NotImplementedError

    def convert(self, tensors: dict[str, torch.Tensor], scheme: LinearScheme) -> QuantizedWeight:
        raise NotImplementedError

    def required(self, scheme: LinearScheme) -> tuple[str, ...]:
        return self.suffixes


class _NotConvertList(_Format):
    """AWQ and GPTQ: one scheme for every linear, ``modules_to_not_convert`` kept float.
    transformers matches those names as substrings of the module name; so do we."""

    def __init__(self, config: dict, source: str) -> None:
        super().__init__(config, source)
        self.not_convert = self._names("modules_to_not_convert")

    def keeps_float(self, name: str, class_name: str) -> bool:
        return any(entry in name for entry in self.not_convert)

    def scheme(self, name: str, class_name: str) -> LinearScheme:
        return self._scheme


class _Awq(_NotConvertList):
    method = "awq"
    suffixes = ("qweight", "qzeros", "scales")

    def __init__(self, config: dict, source: str) -> None:
        super().__init__(config, source)
        version = config.get("version", "gemm")
        if not isinstance(version, str) or version.lower() != "gemm":
            raise self._error("version", version, '"gemm" (gemv, exllama, marlin and ipex pack differently)')
        if config.get("zero_point", True) is not True:
            raise self._error("zero_point", config.get("zero_point"), "true (AWQ's GEMM layout stores zeros)")
        bits = self._int(("bits", "w_bit"), (4,))
        group_size = self._int(("group_size", "q_group_size"), GROUP_SIZES + (PER_CHANNEL,))
        self._scheme = LinearScheme(bits, group_size)

    def convert(self, tensors, scheme):
        from gemm_runtime.quant import from_awq

        return from_awq(tensors["qweight"], tensors["qzeros"], tensors["scales"], group_size=scheme.group_size)


class _Gptq(_NotConvertList):
    method = "gptq"
    suffixes = ("qweight", "qzeros", "scales")
    optional = ("g_idx",)
    # zero = stored + offset: classic "gptq" stores zeros minus one, "gptq_v2" as they are.
    ZERO_POINT_OFFSET = {"gptq": 1, "gptq_v2": 0}

    def __init__(self, config: dict, source: str) -> None:
        super().__init__(config, source)
        key = "checkpoint_format" if "checkpoint_format" in config else "format"
        checkpoint_format = config.get(key, "gptq")
        if not isinstance(checkpoint_format, str) or checkpoint_format not in self.ZERO_POINT_OFFSET:
            raise self._error(key, checkpoint_format, '"gptq" or "gptq_v2" (marlin and bitblas repack the weights)')
        self.zero_point_offset = self.ZERO_POINT_OFFSET[checkpoint_format]
        if config.get("dynamic"):
            # GPTQModel's per-module overrides (regex -> bits / group_size) are not read yet.
            raise self._error("dynamic", config["dynamic"], "null or {} (no per-module overrides)")
        self.act_order = bool(config.get("desc_act", False))
        group_size = self._int(("group_size",), GROUP_SIZES + (PER_CHANNEL,))
        self._scheme = LinearScheme(self._int(("bits",), BITS), group_size)

    def required(self, scheme):
        # Act-order weights are meaningless without their g_idx; others may omit it.
        return self.suffixes + (("g_idx",) if self.act_order else ())

    def convert(self, tensors, scheme):
        from gemm_runtime.quant import from_gptq

        return from_gptq(tensors["qweight"], tensors["qzeros"], tensors["scales"], tensors.get("g_idx"),
                         bits=scheme.bits, group_size=scheme.group_size, zero_point_offset=self.zero_point_offset)


def _ct_matches(target: str, name: str, class_name: str) -> bool:
    """compressed-tensors' matching: "re:" + a regex matched at the start of the module
    name, else the exact module name or the module's class name."""
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target in (name, class_name)


class _CompressedTensors(_Format):
    method = "compressed-tensors"
    suffixes = ("weight_packed", "weight_scale", "weight_shape")
    optional = ("weight_zero_point", "weight_g_idx")
    STRATEGIES = ("group", "channel")

    def __init__(self, config: dict, source: str) -> None:
        super().__init__(config, source)
        self.ignore = self._names("ignore")
        self._patterns("ignore", self.ignore)
        status = config.get("quantization_status", "compressed")
        if status != "compressed":
            raise self._error("quantization_status", status, '"compressed" (packed integer weights on disk)')
        groups = config.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            raise self._error("config_groups", groups, "an object of one or more quantization schemes")
        self.groups: list[tuple[list[str], LinearScheme]] = []
        for group_name, group in groups.items():
            self.groups.append(self._group(f"config_groups.{group_name}", group, config.get("format")))

    def _group(self, key: str, group: object, default_format: object) -> tuple[list[str], LinearScheme]:
        if not isinstance(group, dict):
            raise self._error(key, group, "an object with targets and weights")
        fmt = group.get("format") or default_format
        if fmt != "pack-quantized":
            raise self._error(f"{key}.format" if group.get("format") else "format", fmt,
                              '"pack-quantized" (int4 / int8 weights packed in int32)')
        targets = group.get("targets")
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
            raise self._error(f"{key}.targets", targets, "a non-empty list of names, class names or re: patterns")
        self._patterns(f"{key}.targets", targets)
        if group.get("input_activations") or group.get("output_activations"):
            raise self._error(f"{key}.input_activations", group.get("input_activations"),
                              "null (weight-only quantization: W4A16 / W8A16)")
        weights = group.get("weights")
        if not isinstance(weights, dict):
            raise self._error(f"{key}.weights", weights, "an object with num_bits, type, strategy")
        if weights.get("type", "int") != "int":
            raise self._error(f"{key}.weights.type", weights.get("type"), '"int"')
        if weights.get("dynamic", False) is not False:
            raise self._error(f"{key}.weights.dynamic", weights.get("dynamic"), "false (static weight scales)")
        bits = weights.get("num_bits")
        if isinstance(bits, bool) or bits not in BITS:
            raise self._error(f"{key}.weights.num_bits", bits, " or ".join(map(str, BITS)))
        strategy = weights.get("strategy")
        if strategy not in self.STRATEGIES:
            raise self._error(f"{key}.weights.strategy", strategy, " or ".join(map(repr, self.STRATEGIES)))
        group_size = PER_CHANNEL
        if strategy == "group":
            group_size = weights.get("group_size")
            if isinstance(group_size, bool) or group_size not in GROUP_SIZES:
                raise self._error(f"{key}.weights.group_size", group_size, " or ".join(map(str, GROUP_SIZES)))
        return targets, LinearScheme(bits, group_size)

    def keeps_float(self, name: str, class_name: str) -> bool:
        return any(_ct_matches(t, name, class_name) for t in self.ignore) or not any(
            _ct_matches(t, name, class_name) for targets, _ in self.groups for t in targets
        )

    def scheme(self, name: str, class_name: str) -> LinearScheme:
        # The first group that targets the module wins, as in compressed-tensors' own matching.
        return next(s for targets, s in self.groups if any(_ct_matches(t, name, class_name) for t in targets))

    def convert(self, tensors, scheme):
        from gemm_runtime.quant import from_compressed_tensors

        return from_compressed_tensors(
            tensors["weight_packed"], tensors["weight_scale"], tensors["weight_shape"],
            tensors.get("weight_zero_point"), tensors.get("weight_g_idx"),
            bits=scheme.bits, group_size=scheme.group_size,
        )


_FORMATS: dict[str, Callable[[dict, str], _Format]] = {
    "awq": _Awq, "gptq": _Gptq, "compressed-tensors": _CompressedTensors,
}
METHODS = tuple(_FORMATS)


def quantization_format(quantization_config: object, source: str = "quantization_config") -> _Format:
    """The reader for a ``quantization_config`` (a dict, or a transformers config object
    with ``to_dict()``); CheckpointError naming ``source`` when it is not supported."""
    if hasattr(quantization_config, "to_dict"):
        quantization_config = quantization_config.to_dict()
    if not isinstance(quantization_config, dict):
        raise CheckpointError(source, f"quantization_config: got {quantization_config!r}; accepted: an object")
    method = quantization_config.get("quant_method")
    if not isinstance(method, str) or method not in _FORMATS:
        raise CheckpointError(source, f"quantization_config.quant_method: got {method!r}; accepted: "
                              + ", ".join(map(repr, METHODS)))
    return _FORMATS[method](quantization_config, source)


# --- the plan: which checkpoint tensor goes where ----------------------------------------------------


@dataclass
class _Plan:
    quantized: dict[str, LinearScheme]  # linear name -> scheme
    copies: list[tuple[str, torch.Tensor]]  # checkpoint name -> model tensor to copy it into
    missing: list[str]
    unexpected: list[str]


def _quantized_prefixes(files: CheckpointFiles, fmt: _Format) -> dict[str, set[str]]:
    """Module name -> the format's suffixes found for it. Any of them marks the module, so
    a linear with only some of its tensors is reported as such, not as stray tensors."""
    found: dict[str, set[str]] = {}
    for key in files.keys():
        prefix, _, suffix = key.rpartition(".")
        if suffix in fmt.suffixes + fmt.optional:
            found.setdefault(prefix, set()).add(suffix)
    return found


def _ignored_unexpected(model: torch.nn.Module) -> Callable[[str], bool]:
    """Checkpoint tensors nobody loads on purpose: the model's non-persistent buffers
    (older checkpoints saved rotary inv_freq) and transformers' own ignore patterns."""
    state = set(model.state_dict().keys())
    non_persistent = {name for name, _ in model.named_buffers() if name not in state}
    patterns = [re.compile(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    return lambda key: key in non_persistent or any(p.search(key) for p in patterns)


def _plan(model: torch.nn.Module, files: CheckpointFiles, fmt: _Format) -> _Plan:
    modules = dict(model.named_modules())
    prefixes = _quantized_prefixes(files, fmt)
    quantized: dict[str, LinearScheme] = {}
    for prefix in sorted(prefixes):
        marker = f"{prefix}.{min(prefixes[prefix])}"
        module = modules.get(prefix)
        if not isinstance(module, torch.nn.Linear):
            what = "no such module" if module is None else f"a {type(module).__name__}"
            raise CheckpointError(files.file_of(marker), f"quantized tensors for {prefix!r}, which in the model is "
                                  f"{what}; accepted: a torch.nn.Linear", tensor=marker)
        class_name = type(module).__name__
        if fmt.keeps_float(prefix, class_name):
            raise CheckpointError(files.file_of(marker), f"quantized tensors for {prefix!r}, which quantization_config "
                                  "keeps in float (modules_to_not_convert / ignore / not targeted)", tensor=marker)
        scheme = fmt.scheme(prefix, class_name)
        for suffix in fmt.required(scheme):
            if suffix not in prefixes[prefix]:
                raise CheckpointError(files.file_of(marker), f"missing: a {fmt.method} linear needs "
                                      + ", ".join(f"{prefix}.{s}" for s in fmt.required(scheme)),
                                      tensor=f"{prefix}.{suffix}")
        quantized[prefix] = scheme

    # Everything else pairs up by name. Tied parameters appear under several names and are
    # filled when any one of them is in the checkpoint.
    state = {k: v for k, v in model.state_dict(keep_vars=True).items()
             if not any(k.startswith(p + ".") for p in quantized)}
    consumed = {f"{p}.{s}" for p in quantized for s in prefixes[p]}
    ignored = _ignored_unexpected(model)
    copies, unexpected, filled = [], [], set()
    for key in files.keys():
        if key in consumed:
            continue
        target = state.get(key)
        if target is None:
            if key.endswith(".bias") and key[: -len(".bias")] in quantized:
                continue  # a quantized linear's bias: taken with the layer
            if not ignored(key):
                unexpected.append(key)
            continue
        shape = files.shape(key)
        if shape != tuple(target.shape):
            raise CheckpointError(files.file_of(key), f"shape {shape}; the model's {key} is {tuple(target.shape)}",
                                  tensor=key)
        copies.append((key, target))
        filled.add(id(target))
    missing = [k for k, v in state.items() if id(v) not in filled]
    for prefix in quantized:
        module = modules[prefix]
        if module.bias is not None and f"{prefix}.bias" not in files:
            missing.append(f"{prefix}.bias")
        elif module.bias is None and f"{prefix}.bias" in files:
            unexpected.append(f"{prefix}.bias")
    return _Plan(quantized, copies, missing, unexpected)


# --- loading ----------------------------------------------------------------------------------------


def _check_path(path: object) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise GemmArgumentError("path", type(path).__name__, "a checkpoint folder or file: a str or os.PathLike")


def _layer_dtype(linear: torch.nn.Linear, dtype: torch.dtype | None, path: Path, name: str) -> torch.dtype:
    dtype = dtype or linear.weight.dtype
    if dtype not in SCALE_DTYPES:
        raise CheckpointError(path, f"the model's {name} is {dtype}; quantized layers compute in torch.float16 or "
                              "torch.bfloat16 (build the model in one of them, or pass dtype=)")
    return dtype


def _quant_linear(files: CheckpointFiles, fmt: _Format, name: str, scheme: LinearScheme,
                  linear: torch.nn.Linear, dtype: torch.dtype | None, gemm):
    from gemm_runtime.nn import QuantLinear

    dtype = _layer_dtype(linear, dtype, files.path, name)
    device = linear.weight.device
    tensors = {s: files.get(f"{name}.{s}", device) for s in fmt.suffixes + fmt.optional if f"{name}.{s}" in files}
    for s, t in tensors.items():
        if t.is_floating_point():  # scales: the layer computes in dtype (bf16 -> fp16 is exact in range)
            tensors[s] = t.to(dtype)
    try:
        qw = fmt.convert(tensors, scheme)
    except GemmArgumentError as e:
        # quant.py names its arguments after the tensors (g_idx is weight_g_idx on disk).
        tensor = next((f"{name}.{s}" for s in tensors if e.argument in (s, s.removeprefix("weight_"))), name)
        raise CheckpointError(files.file_of(f"{name}.{fmt.suffixes[0]}"),
                              f"{fmt.method} linear {name!r}: {e}", tensor=tensor) from e
    if qw.shape != (linear.out_features, linear.in_features):
        tensor = f"{name}.{fmt.suffixes[0]}"
        raise CheckpointError(files.file_of(tensor), f"holds a [{qw.shape[0]}, {qw.shape[1]}] weight (out, in); "
                              f"the model's {name} is [{linear.out_features}, {linear.in_features}]", tensor=tensor)
    bias = None
    if linear.bias is not None and f"{name}.bias" in files:
        bias = files.get(f"{name}.bias", device).to(dtype)
        if tuple(bias.shape) != (linear.out_features,):
            raise CheckpointError(files.file_of(f"{name}.bias"), f"shape {tuple(bias.shape)}; accepted: "
                                  f"({linear.out_features},)", tensor=f"{name}.bias")
    return QuantLinear.from_quantized(qw, bias, gemm)


def load_quantized(
    model: torch.nn.Module,
    path: str | Path,
    *,
    gemm=None,
    dtype: torch.dtype | None = None,
    quantization_config: object = None,
    strict: bool = True,
) -> list[str]:
    """Load a quantized checkpoint into ``model`` in place and return the names of the
    linears replaced by ``QuantLinear``, sorted.

    ``path``: a folder with ``model.safetensors`` or ``model.safetensors.index.json``, or
    one of those files. The format comes from ``quantization_config`` when given, else
    from ``config.json`` beside the checkpoint, else from ``model.config``.

    A ``torch.nn.Linear`` whose quantized tensors are in the checkpoint becomes a
    ``QuantLinear`` on the device of the weight it replaces, computing in ``dtype``
    (default: that weight's dtype; fp16 or bf16). Every other checkpoint tensor is copied
    into the model tensor of the same name. ``strict=True``: every model tensor must be
    filled and every checkpoint tensor used, else CheckpointMismatchError lists both, and
    this is checked (with all names and float shapes) before the model is changed;
    ``strict=False`` warns instead (CheckpointWarning). A malformed quantized linear found
    while converting raises CheckpointError with the layers before it already replaced."""
    if not isinstance(model, torch.nn.Module):
        raise GemmArgumentError("model", type(model).__name__, "a torch.nn.Module")
    if not isinstance(strict, bool):
        raise GemmArgumentError("strict", repr(strict), "True or False")
    if dtype is not None and dtype not in SCALE_DTYPES:
        raise GemmArgumentError("dtype", repr(dtype), "torch.float16, torch.bfloat16 or None (the model's)")
    _check_path(path)
    files = CheckpointFiles(path)
    source = "quantization_config"
    if quantization_config is None:
        if (files.folder / CONFIG_FILE).is_file():
            source = str(files.folder / CONFIG_FILE)
            quantization_config = read_config(files.folder).get("quantization_config")
        else:
            source = "model.config"
            quantization_config = getattr(getattr(model, "config", None), "quantization_config", None)
        if quantization_config is None:
            raise CheckpointError(source, "no quantization_config (pass quantization_config= for a checkpoint "
                                  "without config.json)")
    fmt = quantization_format(quantization_config, source)

    plan = _plan(model, files, fmt)
    if plan.missing or plan.unexpected:
        if strict:
            raise CheckpointMismatchError(files.path, plan.missing, plan.unexpected)
        warnings.warn(str(CheckpointMismatchError(files.path, plan.missing, plan.unexpected)), CheckpointWarning,
                      stacklevel=2)

    with torch.no_grad():
        for key, target in plan.copies:
            target.copy_(files.get(key, target.device))
        for name, scheme in plan.quantized.items():
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            layer = _quant_linear(files, fmt, name, scheme, getattr(parent, child), dtype, gemm)
            setattr(parent, child, layer)  # the float Linear (and its weight) goes here
    return sorted(plan.quantized)


def from_pretrained_quantized(
    path: str | Path,
    *,
    model_class=None,
    dtype: torch.dtype = torch.float16,
    device: torch.device | str = "cuda",
    gemm=None,
    strict: bool = True,
    **config_kwargs,
):
    """Build the transformers model ``config.json`` in ``path`` describes (``model_class``,
    default ``AutoModelForCausalLM``, ``from_config``: local files only, no download) in
    ``dtype`` on ``device``, load the quantized checkpoint beside it (``load_quantized``)
    and return the model in eval mode. ``config_kwargs`` go to ``AutoConfig.from_pretrained``.

    The model is first built with random float weights on ``device``, so the peak memory
    is the float model's before its linears are replaced."""
    if dtype not in SCALE_DTYPES:
        raise GemmArgumentError("dtype", repr(dtype), "torch.float16 or torch.bfloat16")
    _check_path(path)
    folder = Path(path)
    if not (folder / CONFIG_FILE).is_file():
        raise CheckpointError(folder / CONFIG_FILE, "no such file: from_pretrained_quantized needs a checkpoint "
                              "folder with config.json")
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(folder), **config_kwargs)
    model_class = model_class or AutoModelForCausalLM
    # Auto classes have from_config; a concrete model class has the classmethod _from_config.
    build = getattr(model_class, "from_config", None) or model_class._from_config
    with torch.device(device):
        model = build(config, dtype=dtype)
    load_quantized(model, folder, gemm=gemm, dtype=dtype, strict=strict)
    return model.eval()
