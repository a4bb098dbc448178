"""Model specs: turn ``--model SPEC`` into a ready-to-run model and its inputs.

A SPEC is one of

* ``path/to/file.py:ClassName`` — the file is imported by path and the class built with no
  arguments, or with its config dataclass (``__init__(self, config: SomeConfig | None = None)``),
  which ``config_overrides`` fill in.  A KernelBench model file (``Model``, ``get_inputs``,
  ``get_init_inputs``) works too; then the class name may be left out.
* ``llama``, ``gpt2``, ``bert`` — the example models shipped in ``examples/``.
* ``hf:ARCH`` (``hf:llama``, ``hf:gpt2``, ``hf:bert``, ``hf:mistral``...) — a Hugging Face
  architecture built from its ``transformers`` config class with random weights (never a
  download); ``config_overrides`` set config attributes (``hidden_size=256``...).

Inputs: a model whose first parameter belongs to an ``nn.Embedding`` takes token ids, and
``input_shape`` is the batch ``(B, S)`` (ids drawn below the embedding's vocabulary size);
any other model takes one float tensor of ``input_shape``.  ``padded`` (``hf:`` token models
only): a padded batch, the ids and an ``attention_mask`` whose rows keep their first L tokens
(row 0 all S, the others L drawn in S/4..S per seed), as a tokenizer pads a batch of texts of
different lengths; the model then runs attention with a mask.

Every user mistake raises :class:`ModelSpecError` with a one-line message.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.util
import inspect
import json
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from .problems.base import dtype_name
from .quiet import quiet_config_warnings

DEFAULT_TOKEN_SHAPE = (2, 32)

# short name -> (file in examples/, class)
EXAMPLES: dict[str, tuple[str, str]] = {
    "llama": ("llama.py", "Llama"),
    "gpt2": ("gpt2.py", "GPT2"),
    "bert": ("bert.py", "Bert"),
}

# Encoder architectures get a masked-LM head; everything else a causal-LM head.
HF_MASKED_LM = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "modernbert"}

# A mixture-of-experts config at its defaults does not fit in memory (Mixtral-8x7B: 47B
# parameters).  Unless the user sets a size, MoE architectures are built this small; the model
# description says so.
MOE_SMALL_CONFIG: dict[str, Any] = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 4, "vocab_size": 4096, "moe_intermediate_size": 256,
    "shared_expert_intermediate_size": 512, "max_position_embeddings": 4096,
}
MOE_EXPERT_ATTRS = ("num_local_experts", "num_experts", "n_routed_experts")
# MoE architectures that keep their experts' settings in a nested config object: model type ->
# (the MOE_SMALL_CONFIG names they have only as a derived value, left out; the nested settings of
# the small config).  DBRX (2.5B parameters by default): the released model's routing, 16 experts,
# 4 a token, each as wide as Mixtral's small experts; its ``num_key_value_heads`` is copied from
# ``attn_config.kv_n_heads`` (1, kept: one kv head suits any number of heads the user sets).
MOE_NESTED_SMALL: dict[str, tuple[tuple[str, ...], dict[str, dict[str, Any]]]] = {
    "dbrx": (("num_key_value_heads",), {"ffn_config": {"ffn_hidden_size": 512, "moe_num_experts": 16, "moe_top_k": 4}}),
}


def _rope_theta(config: Any) -> float:
    """The rotary base of a config's ``rope_parameters`` (10000, transformers' default, where none)."""
    rope = getattr(config, "rope_parameters", None)
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    return float(theta) if isinstance(theta, (int, float)) else 10000.0


# Settings an architecture's code reads from a nested config object that its config class leaves
# unset, or None where None fails (transformers 5.17 and 5.25): model type -> (nested config,
# setting, its value given the config, why).  Filled unless the user's --config gives them; the
# model description says so.  DBRX: ``DbrxAttention`` reads ``attn_config.rope_theta``, which
# ``DbrxAttentionConfig`` no longer has (the rotary takes ``rope_parameters``' base, so that is the
# value), and clamps q/k/v by ``clip_qkv``, None by default, which ``clamp`` refuses.
NESTED_FILLS: dict[str, tuple[tuple[str, str, Callable[[Any], Any], str], ...]] = {
    "dbrx": (("attn_config", "rope_theta", _rope_theta, "rope_parameters' base, which the rotary uses"),
             ("attn_config", "clip_qkv", lambda config: 8.0,
              "the released DBRX checkpoints' value; None fails in the attention's clamp")),
}


class ModelSpecError(ValueError):
    """A model spec, config or input shape that cannot be used (user mistake, exit code 2)."""


@dataclass
class LoadedModel:
    model: nn.Module
    make_inputs: Callable[[int], tuple]  # seed -> positional arguments of model.forward
    spec: str
    description: str
    input_shape: list[int] = field(default_factory=list)
    input_kind: str = "tokens"  # "tokens" | "float" | "kernelbench"
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    config_overrides: dict[str, Any] = field(default_factory=dict)
    padded: bool = False  # token ids and an attention_mask with padded rows (hf: token models)


# ------------------------------------------------------------------ parsing helpers
def parse_input_shape(text: str | None) -> list[int] | None:
    """``1x1024`` (or ``1,1024``) -> [1, 1024]."""
    if text is None or not str(text).strip():
        return None
    parts = re.split(r"[x×,]", str(text).strip().lower())
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise ModelSpecError(f"malformed input shape {text!r}: use sizes like 1x1024") from None
    if any(d <= 0 for d in dims):
        raise ModelSpecError(f"malformed input shape {text!r}: every size must be positive")
    return dims


def parse_config_overrides(text: str | None) -> dict[str, str]:
    """``hidden_size=256,num_hidden_layers=2`` -> {"hidden_size": "256", ...} (values are
    converted to the config field's type when the model is built)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for part in _top_level_parts(str(text)):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ModelSpecError(f"malformed config override {part!r}: use key=value[,key=value...]")
        out[key.strip()] = value.strip()
    return out


def _top_level_parts(text: str) -> list[str]:
    """``a=1,depths=[2,2]`` -> ["a=1", "depths=[2,2]"]: the commas inside brackets belong to a
    list value (Swin's ``depths``, ``num_heads``), those inside braces to a JSON object (Llama's
    ``rope_scaling``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _convert_list(value: str, like: list | tuple, key: str) -> list:
    """``[2,2,6,2]`` -> [2, 2, 6, 2] for a setting whose default is a list; each item converted
    to the type of the default's first."""
    text = value.strip()
    if not (text.startswith("[") and text.endswith("]")):
        example = "[" + ",".join(str(v) for v in like) + "]" if like else "[1,2]"
        raise ModelSpecError(f"config {key}={value!r}: expected a list in brackets, e.g. {key}={example}")
    items = [item.strip() for item in text[1:-1].split(",") if item.strip()]
    example = "[" + ",".join(str(v) for v in like) + "]" if like else "[1,2]"
    if any(ch in item for item in items for ch in "[]"):  # depths=[2,2]] said "config depths='2]': expected an integer"
        raise ModelSpecError(f"config {key}={value!r}: expected one list in brackets, e.g. {key}={example}")
    first = like[0] if like else None
    try:
        return [_convert(item, first, key) for item in items]
    except ModelSpecError as exc:  # name the whole list, not only its item ("config depths='a': ...")
        item_said = str(exc).split(": ", 1)[-1]
        bad = next(item for item in items if _fails(item, first, key))
        raise ModelSpecError(f"config {key}={value!r}: item {bad!r}: {item_said}") from None


def _fails(item: str, like: Any, key: str) -> bool:
    try:
        _convert(item, like, key)
    except ModelSpecError:
        return True
    return False


def _convert(value: Any, like: Any, key: str, per_dimension: bool = False) -> Any:
    """Convert a command-line string to the type of ``like`` (the field's default); ``none`` or
    ``null`` is None whatever the field (Gemma-2's soft caps are floats that None switches off).
    ``per_dimension``: a number may also be a list in brackets (Hugging Face configs, whose own
    validation names a field that takes none)."""
    if not isinstance(value, str):
        return value
    if value.lower() in ("none", "null"):
        return None
    if isinstance(like, (list, tuple)):
        return _convert_list(value, like, key)
    if per_dimension and type(like) in (int, float) and value.strip().startswith("["):
        # a number that may also be given per dimension: ViT's and Swin's image_size=[224,160]
        return _convert_list(value, [like], key)
    if isinstance(like, dict) or (value.strip().startswith("{") and not isinstance(like, (bool, int, float))):
        # a dict for a setting whose default is one, none, or a nested config object (DBRX's
        # ``attn_config``, which transformers takes as a dict too)
        return _convert_object(value, key)
    try:
        if isinstance(like, bool):
            low = value.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if isinstance(like, int):
            return int(value)
        if isinstance(like, float):
            return float(value)
    except ValueError:
        wanted = {bool: "true or false", int: "an integer", float: "a number"}[type(like)]
        raise ModelSpecError(f"config {key}={value!r}: expected {wanted}") from None
    if like is None or isinstance(like, str):
        return _guess(value)
    return value


def _convert_object(value: str, key: str) -> dict:
    """``{"rope_type":"linear","factor":2.0}`` (JSON) -> a dict, for a setting such as Llama's
    ``rope_scaling`` (it was split at its commas and refused as "malformed config override
    '"factor":2.0}'", or reached transformers as a string)."""
    example = '{"rope_type":"linear","factor":2.0}' if "rope" in key else '{"name":1}'
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ModelSpecError(f"config {key}={value!r}: expected a JSON object in braces, e.g. {key}='{example}' "
                             "(quote it for the shell)")
    return parsed


def _guess(value: str) -> Any:
    if value.startswith("[") and value.endswith("]"):  # a list for a setting without a default
        return [_guess(item.strip()) for item in value[1:-1].split(",") if item.strip()]
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def format_shape(shape: list[int] | tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line: its lines joined (a first line that ends with ':'
    says nothing alone: transformers' config validation puts the reason on the next), cut at 300
    characters."""
    msg = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    if len(msg) > 300:
        msg = msg[:297] + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


# ------------------------------------------------------------------ entry point
def load_model(spec: str, *, dtype: torch.dtype = torch.float32, device: str = "cpu",
               input_shape: list[int] | tuple[int, ...] | str | None = None,
               config_overrides: dict[str, Any] | str | None = None,
               validate: bool = True, padded: bool = False) -> LoadedModel:
    """Build the model named by ``spec`` on ``device`` in ``dtype``, in eval mode, and check
    (one forward pass, when ``validate``) that it runs on inputs of ``input_shape``."""
    spec = (spec or "").strip()
    if not spec:
        raise ModelSpecError("empty model spec: give path/to/file.py:ClassName, llama, gpt2, bert or hf:ARCH")
    if isinstance(input_shape, str):
        input_shape = parse_input_shape(input_shape)
    overrides = parse_config_overrides(config_overrides) if isinstance(config_overrides, str) \
        else dict(config_overrides or {})

    if spec.startswith("hf:"):
        model, what, default_shape = _build_hf(spec[3:].strip(), overrides, device, dtype)
        kb_inputs = None
        if input_shape and default_shape and len(input_shape) != len(default_shape):
            raise ModelSpecError(f"{spec} takes a float input of {len(default_shape)} dimensions "
                                 f"(e.g. {format_shape(default_shape)}, its default); --input-shape "
                                 f"{format_shape(input_shape)} has {len(input_shape)}")
        input_shape = input_shape or default_shape
        model = model.to(device=device).eval()  # built in dtype (``_from_config``)
    else:
        path, class_name = _resolve_file_spec(spec)
        module = import_model_file(path)
        model, what, kb_inputs = _build_from_module(module, path, class_name, overrides, device)
        model = model.to(device=device, dtype=dtype).eval()
    empty = next(((name, tuple(p.shape)) for name, p in model.named_parameters() if p.numel() == 0), None)
    if empty is not None:
        raise ModelSpecError(f"{spec}{' with this --config' if overrides else ''} has an empty weight "
                             f"({empty[0]} {'x'.join(map(str, empty[1]))}): every size must be positive")
    loaded = _attach_inputs(model, spec, what, kb_inputs, input_shape, dtype, device)
    loaded.config_overrides = overrides
    if padded:
        pad_inputs(loaded)
    if validate:
        check_forward(loaded)
    return loaded


def examples_dir() -> Path:
    """The shipped example models: ``examples/`` next to ``src/`` in the source tree (the
    package is installed editable from it)."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[2] / "examples", Path.cwd() / "examples"):
        if (candidate / EXAMPLES["llama"][0]).is_file():
            return candidate
    raise ModelSpecError("the shipped example models were not found (examples/ beside src/); "
                         "install autokernel editable from its source tree or give --model path/to/file.py:ClassName")


def _resolve_file_spec(spec: str) -> tuple[Path, str | None]:
    if spec in EXAMPLES:
        file_name, class_name = EXAMPLES[spec]
        return examples_dir() / file_name, class_name
    path_text, class_name = spec, None
    head, sep, tail = spec.rpartition(":")
    if sep and tail and not tail.endswith(".py") and "/" not in tail and "\\" not in tail:
        path_text, class_name = head, tail
        if not class_name.isidentifier():
            raise ModelSpecError(f"malformed model spec {spec!r}: {class_name!r} is not a class name")
    path = Path(path_text).expanduser()
    if path.suffix != ".py":
        known = ", ".join(list(EXAMPLES) + ["hf:ARCH"])
        raise ModelSpecError(f"unknown model {spec!r}: give path/to/file.py:ClassName or one of {known}")
    if not path.is_file():
        raise ModelSpecError(f"model file not found: {path}")
    return path.resolve(), class_name


def import_model_file(path: Path):
    """Import a Python file by path under a stable module name (registered in sys.modules so
    that dataclasses, pickling and later patching find it)."""
    path = Path(path).resolve()
    stem = re.sub(r"\W", "_", path.stem)
    name = f"autokernel_model_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelSpecError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # sibling imports inside the file
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        raise ModelSpecError(f"could not import {path}: {_one_line(exc)}") from None
    finally:
        try:
            sys.path.remove(str(path.parent))
        except ValueError:
            pass
    return module


def _module_classes(module) -> list[str]:
    return [n for n, obj in vars(module).items()
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == module.__name__]


def _build_from_module(module, path: Path, class_name: str | None, overrides: dict[str, Any],
                       device: str) -> tuple[nn.Module, str, Callable[[], list] | None]:
    kernelbench = callable(getattr(module, "get_inputs", None)) and callable(getattr(module, "get_init_inputs", None))
    if class_name is None:
        if kernelbench and inspect.isclass(getattr(module, "Model", None)):
            class_name = "Model"
        else:
            classes = ", ".join(_module_classes(module)) or "none"
            raise ModelSpecError(f"name the model class: {path}:ClassName (nn.Module classes in the file: {classes})")
    cls = getattr(module, class_name, None)
    if cls is None:
        classes = ", ".join(_module_classes(module)) or "none"
        raise ModelSpecError(f"{path} defines no {class_name!r} (nn.Module classes in the file: {classes})")
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise ModelSpecError(f"{path}:{class_name} is not a torch.nn.Module subclass")

    if kernelbench:
        if overrides:
            raise ModelSpecError(f"{path}:{class_name} is a KernelBench model (get_init_inputs); --config does not apply")
        try:
            init_args = list(module.get_init_inputs())
            with torch.device(device):
                model = cls(*init_args)
        except Exception as exc:
            raise ModelSpecError(f"building {class_name} from {path} failed: {_one_line(exc)}") from None
        return model, f"{class_name} from {path.name} (KernelBench)", module.get_inputs

    args, kwargs, what = _constructor_arguments(cls, overrides, f"{path}:{class_name}")
    try:
        with torch.device(device):
            model = cls(*args, **kwargs)
    except ModelSpecError:
        raise
    except Exception as exc:
        raise ModelSpecError(f"building {class_name} from {path} failed: {_one_line(exc)}") from None
    return model, f"{class_name} from {path.name}{what}", None


def _dataclass_in(hint: Any) -> type | None:
    if inspect.isclass(hint) and dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        if inspect.isclass(arg) and dataclasses.is_dataclass(arg):
            return arg
    return None


def _constructor_arguments(cls: type, overrides: dict[str, Any], where: str) -> tuple[list, dict, str]:
    """How to call ``cls``: with nothing, with a config dataclass built from the overrides,
    or with keyword arguments matching the overrides."""
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    params = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:
        hints = {}
    config_param = next((p for p in params if _dataclass_in(hints.get(p.name)) is not None), None)
    required = [p for p in params if p.default is p.empty and p is not config_param]
    if required:
        names = ", ".join(p.name for p in required)
        raise ModelSpecError(f"{where} needs constructor argument(s) autokernel cannot give ({names}); "
                             "give them defaults or take a config dataclass")

    if config_param is not None:
        if not overrides and config_param.default is not config_param.empty:
            return [], {}, ""
        cfg_cls = _dataclass_in(hints[config_param.name])
        config = build_config(cfg_cls, overrides)
        shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
        return [], {config_param.name: config}, f" ({cfg_cls.__name__}: {shown})" if shown else ""

    if overrides:
        by_name = {p.name: p for p in params}
        unknown = [k for k in overrides if k not in by_name]
        if unknown:
            known = ", ".join(by_name) or "none"
            raise ModelSpecError(f"{where} has no setting {unknown[0]!r} (constructor arguments: {known})")
        kwargs = {k: _convert(v, by_name[k].default, k) for k, v in overrides.items()}
        return [], kwargs, " (" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
    return [], {}, ""


def build_config(cfg_cls: type, overrides: dict[str, Any]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cfg_cls)}
    values = {}
    for key, value in overrides.items():
        if key not in fields:
            raise ModelSpecError(f"{cfg_cls.__name__} has no field {key!r} (fields: {', '.join(fields)})")
        f = fields[key]
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        values[key] = _convert(value, default, key)
    try:
        return cfg_cls(**values)
    except Exception as exc:
        raise ModelSpecError(f"{cfg_cls.__name__}({', '.join(f'{k}={v}' for k, v in values.items())}) failed: "
                             f"{_one_line(exc)}") from None


# ------------------------------------------------------------------ Hugging Face
class LogitsOnly(nn.Module):
    """Wraps a ``transformers`` model so that ``forward(input_ids)`` returns the logits tensor."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


class Seq2SeqLogits(LogitsOnly):
    """An encoder-decoder model: the same token ids feed the encoder and the decoder."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits


class ImageLogits(nn.Module):
    """A vision model: ``forward(pixel_values)`` returns the classification logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


# the decoder token ids a speech encoder-decoder is fed with its features (fewer where it has fewer positions)
SPEECH_DECODER_TOKENS = 128


class SpeechSeq2SeqLogits(nn.Module):
    """A speech encoder-decoder (Whisper): ``forward(features)`` feeds the features to the encoder
    (as the model's main input, Whisper's log-mel ``input_features``) and ``decoder_tokens`` fixed
    token ids to the decoder, one teacher-forced pass, and returns the logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        config = model.config
        self.decoder_tokens = min(SPEECH_DECODER_TOKENS, int(getattr(config, "max_target_positions", None)
                                                             or SPEECH_DECODER_TOKENS))
        self.vocab = int(config.vocab_size)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        ids = (torch.arange(self.decoder_tokens, device=features.device) % self.vocab).expand(features.shape[0], -1)
        return self.model(**{self.model.main_input_name: features}, decoder_input_ids=ids).logits


def hf_auto_class(transformers: Any, config: Any) -> tuple[Any, type]:
    """The auto class for a config and the wrapper that gives its forward one tensor input:
    masked LM (encoder-only), seq2seq LM (encoder-decoder), speech seq2seq (Whisper), image
    classification (vision), causal LM (decoders, MoE included), else the bare model."""
    from transformers.models.auto import modeling_auto as names

    kind = config.model_type
    if kind in HF_MASKED_LM:
        return transformers.AutoModelForMaskedLM, LogitsOnly
    if getattr(config, "is_encoder_decoder", False) and kind in names.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return transformers.AutoModelForSeq2SeqLM, Seq2SeqLogits
    if getattr(config, "is_encoder_decoder", False) and kind in names.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES:
        return transformers.AutoModelForSpeechSeq2Seq, SpeechSeq2SeqLogits
    if kind in names.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return transformers.AutoModelForImageClassification, ImageLogits
    if kind in names.MODEL_FOR_MASKED_LM_MAPPING_NAMES and (kind not in names.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
                                                           or not getattr(config, "is_decoder", False)):
        # an encoder with a causal head for decoder use as well (XLM-RoBERTa, CamemBERT, RoFormer...):
        # built as the encoder it is unless its config says it is a decoder
        return transformers.AutoModelForMaskedLM, LogitsOnly
    return transformers.AutoModelForCausalLM, LogitsOnly


def hf_default_input_shape(config: Any) -> list[int] | None:
    """A vision model's default input: 2 images at the config's size (``B x C x H x W``); a
    Whisper-style speech model's: the log-mel features of 2 clips, as many frames as its encoder
    takes (twice its positions: its convolutions halve them)."""
    size = getattr(config, "image_size", None)
    if isinstance(size, int):
        size = [size, size]
    if _two_sizes(size) and getattr(config, "patch_size", None):
        return [2, int(getattr(config, "num_channels", 3)), int(size[0]), int(size[1])]
    mels, positions = getattr(config, "num_mel_bins", None), getattr(config, "max_source_positions", None)
    if getattr(config, "is_encoder_decoder", False) and isinstance(mels, int) and isinstance(positions, int):
        return [2, mels, 2 * positions]
    return None


def _two_sizes(size: Any) -> bool:
    """Whether ``size`` is an image's (height, width): two integers, as a list or a tuple."""
    return isinstance(size, (list, tuple)) and len(size) == 2 and all(
        isinstance(d, int) and not isinstance(d, bool) for d in size)


def image_size_error(config: Any) -> str:
    """Why the config's ``image_size`` is no image size (a list of other than two numbers), or ""."""
    size = _setting(config, "image_size")
    if isinstance(size, (list, tuple)) and not _two_sizes(size):
        return (f"image_size={list(size)} is no image size: give one number or a height and width, "
                "e.g. image_size=[224,160]")
    return ""


def _setting(config: Any, name: str) -> Any:
    """A config value, None where there is none.  Configs with per-layer settings (dots3_note)
    raise on reading one globally; that counts as no single value."""
    try:
        return getattr(config, name, None)
    except Exception:
        return None


def _has_setting(config: Any, name: str) -> bool:
    try:
        return hasattr(config, name)
    except Exception:  # a per-layer setting: it is there, with no single value
        return True


def _did_you_mean(arch: str) -> str:
    import difflib

    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError:
        return ""
    close = difflib.get_close_matches(arch.lower(), list(CONFIG_MAPPING_NAMES), n=3, cutoff=0.7)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _setting_like(config: Any, key: str) -> str:
    """A suggestion ("; did you mean num_heads?") for a setting the config lacks (hf:swin's
    ``num_head`` or ``Depths`` said only "SwinConfig has no setting 'num_head'")."""
    import difflib

    try:
        names = [k for k in config.to_dict() if not k.startswith("_")]
    except Exception:  # noqa: BLE001 - no list of names: no suggestion
        return ""
    lower = {n.lower(): n for n in names}
    if key.lower() in lower:
        return f"; did you mean {lower[key.lower()]}?"
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.75)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def special_tokens_inside(default: Any, values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """bos/eos/pad/decoder-start ids the user did not set that lie outside a vocabulary made
    smaller: transformers warns about each on every build (GPT-2's 50256 at vocab_size=1024,
    Whisper's decoder start 50257 at vocab_size=256).  bos and eos are dropped, pad and the decoder
    start moved to the last row (an embedding's padding row must lie inside its table; a decoder
    start stays a token id, as generation and shifted labels read it)."""
    vocab = values.get("vocab_size")
    if not isinstance(vocab, int):
        return {}
    out: dict[str, Any] = {}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        token = _setting(default, key)
        if key not in overrides and key not in values and isinstance(token, int) and token >= vocab:
            out[key] = vocab - 1 if key in ("pad_token_id", "decoder_start_token_id") else None
    return out


def real_name(config: Any, key: str) -> str:
    """The config's own name of a setting it also takes under another (``attribute_map``: DBRX's
    ``hidden_size`` is ``d_model``).  Given by the other name, transformers sets it after the
    config's own post-init: DBRX's experts kept the default width 2048 at ``hidden_size=256``."""
    aliases = getattr(config, "attribute_map", None)
    return aliases.get(key, key) if isinstance(aliases, dict) else key


def moe_small_overrides(default: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """The small MoE config settings the user did not set (none for a dense architecture), by the
    config's own names; a nested config's (``MOE_NESTED_SMALL``) as a dict of the settings the
    user's dict for it does not give."""
    derived, nested = MOE_NESTED_SMALL.get(getattr(default, "model_type", None), ((), {}))
    if not nested and not any(isinstance(_setting(default, a), int) and _setting(default, a) > 1
                              for a in MOE_EXPERT_ATTRS):
        return {}
    small = {real_name(default, k): v for k, v in MOE_SMALL_CONFIG.items()
             if _has_setting(default, k) and k not in derived and real_name(default, k) not in overrides}
    for sub, settings in nested.items():
        given = overrides.get(sub, {})
        if isinstance(given, dict) and any(k not in given for k in settings):
            small[sub] = {k: v for k, v in settings.items() if k not in given}
    heads, kv_heads = _setting(default, "num_attention_heads"), _setting(default, "num_key_value_heads")
    if "num_key_value_heads" in small and heads == kv_heads:
        # no grouped-query attention at full size (DeepSeek's latent attention needs it): none when small
        small["num_key_value_heads"] = overrides.get("num_attention_heads", small.get("num_attention_heads"))
    dense_first = _setting(default, "first_k_dense_replace")
    if isinstance(dense_first, int) and dense_first > 1 and "first_k_dense_replace" not in overrides:
        small["first_k_dense_replace"] = 1  # DeepSeek-V3's first 3 layers are dense: 2 layers had no experts
    pad = _setting(default, "pad_token_id")
    vocab = small.get("vocab_size")
    if vocab is not None and "pad_token_id" not in overrides and isinstance(pad, int) and pad >= vocab:
        small["pad_token_id"] = vocab - 1  # the embedding's padding row must lie inside the smaller table
    return small


def fill_nested_settings(config: Any, values: dict[str, Any]) -> list[str]:
    """Set the ``NESTED_FILLS`` of ``config``'s architecture that it lacks (or holds as None) and the
    user's ``values`` do not give; what was filled, as ``name=value (why)`` notes.  hf:dbrx failed to
    build from its defaults ("'DbrxAttentionConfig' object has no attribute 'rope_theta'"), and
    with that given, its forward ("torch.clamp: At least one of 'min' or 'max' must not be None")."""
    notes = []
    for sub, name, value_of, why in NESTED_FILLS.get(getattr(config, "model_type", None), ()):
        nested, given = _setting(config, sub), values.get(sub)
        if nested is None or (isinstance(given, dict) and name in given) or _setting(nested, name) is not None:
            continue
        value = value_of(config)
        setattr(nested, name, value)
        notes.append(f"{sub}.{name}={value} ({why})")
    return notes


def moe_routing_error(config: Any) -> str | None:
    """What makes an MoE config's routing impossible: no experts, more experts a token than there
    are (the forward's top-k fails with 'selected index k out of range'), or experts a token
    left unset (DeepSeek-V2's default config: 'topk(): argument k must be int, not NoneType')."""
    name = next((a for a in MOE_EXPERT_ATTRS if isinstance(_setting(config, a), int)), None)
    per_token = _setting(config, "num_experts_per_tok")
    if name is not None and per_token is None and _setting(config, name) > 1 and _has_setting(config, "num_experts_per_tok"):
        return "num_experts_per_tok (experts a token) is not set"
    if name is None or not isinstance(per_token, int):
        return None
    experts = _setting(config, name)
    if experts < 1:
        return f"{name}={experts}: a mixture of experts needs at least one expert"
    if per_token < 1:
        return f"num_experts_per_tok={per_token}: each token needs at least one expert"
    if per_token > experts:
        return f"num_experts_per_tok={per_token} experts a token is more than the {experts} experts ({name})"
    return None


def kv_heads_error(config: Any, overrides: dict[str, Any]) -> str | None:
    """Query heads that do not split into equal groups over the key/value heads, where the user
    set either: ``--config num_attention_heads=8`` on hf:stablelm (32 kv heads by default) failed
    in the forward pass with "The size of tensor a (8) must match the size of tensor b (32)"."""
    if not {"num_attention_heads", "num_key_value_heads"} & set(overrides):
        return None
    heads, kv = _setting(config, "num_attention_heads"), _setting(config, "num_key_value_heads")
    for name, value in (("num_attention_heads", heads), ("num_key_value_heads", kv)):
        if name in overrides and isinstance(value, int) and value < 1:  # the build divided by it
            return f"{name}={value}: attention needs at least one head"
    if not (isinstance(heads, int) and isinstance(kv, int)) or heads < 1 or kv < 1 or heads % kv == 0:
        return None
    whose = "" if "num_key_value_heads" in overrides else " (the default)"
    return (f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}{whose}: the query heads "
            f"share the key/value heads in equal groups; set num_key_value_heads to a divisor of {heads}, "
            f"e.g. num_key_value_heads={heads}")


def list_lengths_hint(default: Any, config: Any, overrides: dict[str, Any]) -> str | None:
    """Where a list the user set has another length than a list setting that is as long as it by
    default (Swin's ``num_heads`` and ``depths``, one item a stage): which two, for the message of
    a build that failed (``--config num_heads=[3,4]`` with the default four stages failed with
    "IndexError: list index out of range" alone)."""
    try:
        defaults = default.to_dict()
    except Exception:
        return None
    lists = {k: v for k, v in defaults.items() if isinstance(v, (list, tuple)) and len(v) > 1}
    for key in overrides:
        mine = _setting(config, key)
        if key not in lists or not isinstance(mine, (list, tuple)):
            continue
        for other, other_default in lists.items():
            theirs = _setting(config, other)
            if other == key or len(other_default) != len(lists[key]) or not isinstance(theirs, (list, tuple)) \
                    or len(theirs) == len(mine):
                continue
            whose = "" if other in overrides else " (the default)"
            shown = "[" + ",".join(str(v) for v in theirs) + "]"
            return (f"{key} has {len(mine)} item(s) but {other}={shown}{whose} has {len(theirs)}: they go "
                    f"together, an item each; give both the same length with --config")
    return None


def _from_config(auto: Any, config: Any, dtype: torch.dtype, **kwargs: Any) -> nn.Module:
    """The model built in ``dtype``, as ``from_pretrained(..., dtype=...)`` builds it: what a model
    keeps in fp32 stays fp32 (its RoPE ``inv_freq``; ``_keep_in_fp32_modules``), where a
    ``.to(dtype)`` afterwards converted it (and the bf16 ``inv_freq`` was no ``rotary_table``).
    transformers before 4.56 names the argument ``torch_dtype``."""
    try:
        return auto.from_config(config, dtype=dtype, **kwargs)
    except TypeError:
        return auto.from_config(config, torch_dtype=dtype, **kwargs)


def _build_hf(arch: str, overrides: dict[str, Any], device: str,
              dtype: torch.dtype = torch.float32) -> tuple[nn.Module, str, list[int] | None]:
    try:
        import transformers
    except ImportError:
        raise ModelSpecError("hf: models need the transformers package (install the extra: "
                             "pip install 'autokernel[hf]')") from None
    if not arch:
        raise ModelSpecError("malformed model spec 'hf:': name an architecture, e.g. hf:llama")
    try:
        with quiet_config_warnings():
            default = transformers.AutoConfig.for_model(arch)
    except (ValueError, KeyError):
        raise ModelSpecError(f"unknown Hugging Face architecture {arch!r}{_did_you_mean(arch)} "
                             "(transformers model types such as llama, mistral, qwen2, gpt2, bert)") from None
    values = {}
    for key, value in overrides.items():
        if not _has_setting(default, key):
            raise ModelSpecError(f"{type(default).__name__} has no setting {key!r}{_setting_like(default, key)}")
        values[real_name(default, key)] = _convert(value, _setting(default, key), key, per_dimension=True)
    small = moe_small_overrides(default, values)
    values = {**small, **special_tokens_inside(default, {**small, **values}, overrides), **values}
    for sub, settings in small.items():
        if isinstance(settings, dict):  # a nested config's: the user's dict for it gives the rest
            values[sub] = {**settings, **values.get(sub, {})}
    try:
        # Built again with the overrides so that derived settings (head_dim...) follow them.
        config = transformers.AutoConfig.for_model(arch, **values)
    except Exception as exc:
        raise ModelSpecError(f"hf:{arch} config {values} failed: {_one_line(exc)}") from None
    filled = fill_nested_settings(config, values)
    wrong = moe_routing_error(config) or kv_heads_error(config, overrides) or image_size_error(config)
    if wrong:
        raise ModelSpecError(f"hf:{arch} config: {wrong}; set them with --config")
    if hasattr(config, "use_cache"):
        config.use_cache = False  # a forward pass, not generation: no KV cache
    if getattr(config, "architectures", None) is None:
        # an auto class with several classes for one type (deit: with a teacher head or without)
        # picks one by looping over this list, None on a config built from scratch: the first
        config.architectures = []
    auto, wrapper = hf_auto_class(transformers, config)
    _check_size(arch, auto, config, dtype, device)
    try:
        with torch.device(device):
            try:
                # a copy: a refused "sdpa" stays marked on the config it was asked of
                model = _from_config(auto, copy.deepcopy(config), dtype, attn_implementation="sdpa")
            except (TypeError, ValueError, ImportError):
                model = _from_config(auto, config, dtype)
    except Exception as exc:
        hint = list_lengths_hint(default, config, overrides)
        raise ModelSpecError(f"building hf:{arch} failed: {_one_line(exc)}" + (f" ({hint})" if hint else "")) from None
    shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
    what = f"{type(model).__name__} (transformers, random weights{': ' + shown if shown else ''})"
    wrapped = wrapper(model)
    if isinstance(wrapped, SpeechSeq2SeqLogits):
        what += f" [decoder fed {wrapped.decoder_tokens} token ids]"
    if filled:
        what += f" [unset in {type(config).__name__}, filled in: {', '.join(filled)}; set them with --config]"
    if small:
        shown_small = (f"{k}={json.dumps(v, separators=(',', ':')) if isinstance(v, dict) else v}" for k, v in small.items())
        what += (" [mixture of experts: small default config " + ", ".join(shown_small)
                 + "; set them with --config]")
    return wrapped, what, hf_default_input_shape(config)


# the share of the memory free on the device that a model's weights may take (activations, the
# compiled and patched copies verify builds, and the profile need the rest)
WEIGHTS_SHARE = 0.5


def free_memory_bytes(device: str) -> int | None:
    """Memory free for a new model on ``device``: the GPU's free memory, the host's available
    memory (``MemAvailable``) on a CPU; None where it cannot be read."""
    if str(device).startswith("cuda"):
        try:
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except Exception:  # noqa: BLE001 - no answer: no check
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_size(arch: str, auto: Any, config: Any, dtype: torch.dtype, device: str) -> None:
    """Refuse a model whose weights alone would take more than ``WEIGHTS_SHARE`` of the free
    memory: built anyway, a forgotten ``--config`` on a dense model (hf:qwen3 at 8B parameters)
    was killed for memory with no word.  The weights are counted on the meta device."""
    free = free_memory_bytes(device)
    if free is None:
        return
    try:
        with torch.device("meta"):
            meta = _from_config(auto, copy.deepcopy(config), dtype)
    except Exception:  # noqa: BLE001 - a model that cannot be built on meta is built and seen
        return
    n = sum(p.numel() for p in meta.parameters())
    size = sum(t.numel() * t.element_size() for t in list(meta.parameters()) + list(meta.buffers()))
    if size > WEIGHTS_SHARE * free:
        raise ModelSpecError(
            f"hf:{arch} at this config has {n / 1e9:.2f}B parameters ({size / 2**30:.1f} GiB in {dtype_name(dtype)}), "
            f"more than half of the {free / 2**30:.1f} GiB free on {device}: give a smaller config with --config, "
            f"e.g. {smaller_config_hint(config)}")


# (the names configs give a setting, the value that makes a model small); 8 heads keep a 64-wide
# head at hidden 512 (Falcon's default 71 heads gave 7)
SMALL_SETTINGS = ((("hidden_size", "d_model", "n_embd"), 512),
                  (("intermediate_size", "ffn_dim", "d_ff", "ffn_hidden_size"), 1408),
                  (("num_hidden_layers", "num_layers", "n_layer"), 4),
                  (("num_attention_heads", "num_heads", "n_head"), 8),
                  (("num_key_value_heads", "num_kv_heads"), 8))


def smaller_config_hint(config: Any) -> str:
    """A ``--config`` value that makes ``config``'s model small, in the names ``config`` uses."""
    parts = []
    for names, value in SMALL_SETTINGS:
        name = next((n for n in names if getattr(config, n, None) is not None), None)
        if name is not None:
            parts.append(f"{name}={value}")
    return ",".join(parts)


# ------------------------------------------------------------------ inputs
def float_input_example(model: nn.Module) -> str:
    """An ``--input-shape`` the model's first layer takes: 8 x channels x 32 x 32 for a
    convolution (x 32 per spatial dimension), 8 x features for a linear layer, else 8x512."""
    first = next((m for m in model.modules() if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear))), None)
    if isinstance(first, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return "x".join(["8", str(first.in_channels)] + ["32"] * len(first.kernel_size))
    if isinstance(first, nn.Linear):
        return f"8x{first.in_features}"
    return "8x512"


def token_vocab(model: nn.Module) -> int | None:
    """The vocabulary size of a model that takes token ids: a transformers model whose main input
    is ``input_ids`` by its input embeddings (XLM-RoBERTa's causal LM registers its head's
    parameters before them), any other when its first parameter is an embedding table."""
    library = next((m for m in model.modules() if isinstance(getattr(m, "main_input_name", None), str)
                    and callable(getattr(m, "get_input_embeddings", None))), None)
    if library is not None and library.main_input_name == "input_ids":
        try:
            embeddings = library.get_input_embeddings()
        except (NotImplementedError, AttributeError):
            embeddings = None
        if isinstance(embeddings, nn.Embedding):
            return embeddings.num_embeddings
    first = next(iter(model.named_parameters()), None)
    if first is None:
        return None
    owner_name = first[0].rpartition(".")[0]
    owner = model.get_submodule(owner_name) if owner_name else model
    return owner.num_embeddings if isinstance(owner, nn.Embedding) else None


def _attach_inputs(model: nn.Module, spec: str, what: str, kb_inputs: Callable[[], list] | None,
                   input_shape: list[int] | tuple[int, ...] | None, dtype: torch.dtype, device: str) -> LoadedModel:
    n_params = sum(p.numel() for p in model.parameters())
    size = f"{n_params / 1e6:.2f}M parameters" if n_params >= 1e4 else f"{n_params} parameters"

    if kb_inputs is not None:
        def make_inputs(seed: int) -> tuple:
            torch.manual_seed(seed)
            out = []
            for a in kb_inputs():
                if isinstance(a, torch.Tensor):
                    a = a.to(device=device, dtype=dtype if a.is_floating_point() else a.dtype)
                out.append(a)
            return tuple(out)
        shapes = [list(a.shape) for a in make_inputs(0) if isinstance(a, torch.Tensor)]
        desc = f"{what}, {size}, {dtype_name(dtype)}, inputs from get_inputs()"
        return LoadedModel(model, make_inputs, spec, desc, shapes[0] if shapes else [], "kernelbench", dtype, device)

    vocab = token_vocab(model)
    if vocab is not None:
        shape = list(input_shape) if input_shape else list(DEFAULT_TOKEN_SHAPE)
        if len(shape) != 2:
            raise ModelSpecError(f"{spec} takes token ids: --input-shape is BxS (e.g. 1x1024), got {format_shape(shape)}")

        def make_inputs(seed: int) -> tuple:
            g = torch.Generator().manual_seed(int(seed))
            return (torch.randint(0, vocab, tuple(shape), generator=g).to(device),)
        desc = f"{what}, {size}, {dtype_name(dtype)}, token ids {format_shape(shape)} (vocab {vocab})"
        return LoadedModel(model, make_inputs, spec, desc, shape, "tokens", dtype, device)

    if not input_shape:
        raise ModelSpecError(f"{spec} does not take token ids (its first parameter is not an embedding): "
                             f"give --input-shape for its float input, e.g. {float_input_example(model)}")
    shape = list(input_shape)

    def make_inputs(seed: int) -> tuple:
        g = torch.Generator().manual_seed(int(seed))
        return (torch.randn(tuple(shape), generator=g).to(device=device, dtype=dtype),)
    desc = f"{what}, {size}, {dtype_name(dtype)}, float input {format_shape(shape)}"
    return LoadedModel(model, make_inputs, spec, desc, shape, "float", dtype, device)


def padding_mask(shape: list[int] | tuple[int, ...], seed: int) -> torch.Tensor:
    """An ``attention_mask`` [B, S] of a right-padded batch: row 0 keeps all S tokens, each
    other row its first L, L drawn in S/4..S from ``seed``."""
    b, s = shape
    g = torch.Generator().manual_seed(int(seed) + 7919)
    lengths = torch.randint(max(1, s // 4), s + 1, (b,), generator=g)
    lengths[0] = s
    return (torch.arange(s)[None, :] < lengths[:, None]).long()


def pad_inputs(loaded: LoadedModel) -> None:
    """Make ``loaded`` take padded batches: ``make_inputs`` returns (ids, attention_mask)."""
    if not isinstance(loaded.model, LogitsOnly) or loaded.input_kind != "tokens":
        raise ModelSpecError(f"--padded needs a Hugging Face model that takes token ids (hf:ARCH); {loaded.spec} "
                             "does not take an attention_mask")
    ids_only = loaded.make_inputs
    device = loaded.device

    def make_inputs(seed: int) -> tuple:
        (ids,) = ids_only(seed)
        return ids, padding_mask(loaded.input_shape, seed).to(device)

    loaded.make_inputs = make_inputs
    loaded.padded = True
    loaded.description += ", padded rows (attention_mask)"


def check_forward(loaded: LoadedModel) -> None:
    """One forward pass; a failure becomes a one-line ModelSpecError."""
    try:
        with torch.no_grad():
            loaded.model(*loaded.make_inputs(0))
    except torch.cuda.OutOfMemoryError:
        raise ModelSpecError(f"{loaded.spec} at input {format_shape(loaded.input_shape)} does not fit in GPU memory; "
                             "use a smaller --input-shape or --config") from None
    except Exception as exc:
        limit = position_limit(loaded)
        if limit is not None and len(loaded.input_shape) >= 2 and loaded.input_shape[-1] > limit[1]:
            name, n = limit
            raise ModelSpecError(f"input {format_shape(loaded.input_shape)} does not fit {loaded.spec}: "
                                 f"{loaded.input_shape[-1]} tokens are more than it has positions for ({name}={n}); use --input-shape "
                                 f"{format_shape(list(loaded.input_shape[:-1]) + [n])} or --config {name}=...") from None
        frames = speech_frames_hint(loaded)
        if frames:
            raise ModelSpecError(f"input {format_shape(loaded.input_shape)} does not fit {loaded.spec}: "
                                 f"{frames}") from None
        given = ", ".join(f"{k}={v}" for k, v in (loaded.config_overrides or {}).items())
        why = _hf_list_lengths_hint(loaded) or "one of them may not suit the others"
        raise ModelSpecError(f"input {format_shape(loaded.input_shape)} does not fit {loaded.spec}"
                             + (f" with its --config ({given}; {why})" if given else "")
                             + f": a forward pass failed with {_one_line(exc)}") from None


def _hf_list_lengths_hint(loaded: LoadedModel) -> str | None:
    """``list_lengths_hint`` for a built hf: model whose forward pass failed (Swin built with
    ``depths=[2,2]`` and the default four ``num_heads``, then failed in its forward)."""
    if not loaded.spec.startswith("hf:") or not loaded.config_overrides:
        return None
    try:
        import transformers

        with quiet_config_warnings():
            default = transformers.AutoConfig.for_model(loaded.spec[3:].strip())
    except Exception:  # noqa: BLE001 - no default to compare with: no hint
        return None
    inner = getattr(loaded.model, "model", loaded.model)
    config = getattr(inner, "config", None)
    return list_lengths_hint(default, config, loaded.config_overrides) if config is not None else None


def speech_frames_hint(loaded: LoadedModel) -> str | None:
    """For a speech model given another number of frames than its encoder takes (Whisper takes
    exactly twice its max_source_positions), how to ask for that many; None otherwise."""
    if not isinstance(loaded.model, SpeechSeq2SeqLogits) or len(loaded.input_shape) != 3:
        return None
    positions = getattr(loaded.model.model.config, "max_source_positions", None)
    frames = loaded.input_shape[-1]
    if not isinstance(positions, int) or frames == 2 * positions:
        return None
    fix = (f"give --config max_source_positions={frames // 2} with it" if frames % 2 == 0 and frames >= 2
           else "give an even number of frames and --config max_source_positions=<frames / 2>")
    return (f"its encoder takes exactly 2 x max_source_positions = {2 * positions} frames; for {frames} frames "
            f"{fix} (or leave out --input-shape for {2 * positions})")


POSITION_LIMITS = ("n_positions", "max_position_embeddings", "max_seq_len", "block_size", "max_position")


def position_limit(loaded: LoadedModel) -> tuple[str, int] | None:
    """The longest sequence a token model's config allows (its name and value), where it says one."""
    for holder in (getattr(loaded.model, "config", None), getattr(getattr(loaded.model, "model", None), "config", None),
                   getattr(loaded.model, "cfg", None)):
        for name in POSITION_LIMITS:
            value = getattr(holder, name, None) if holder is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return name, value
    return None


def output_tensor(output: Any) -> torch.Tensor:
    """The main tensor of a model output: the tensor itself, ``.logits``, or the first tensor
    in a tuple, list or dict."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    items = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    for item in items:
        if isinstance(item, torch.Tensor):
            return item
    raise TypeError(f"model output of type {type(output).__name__} holds no tensor")
