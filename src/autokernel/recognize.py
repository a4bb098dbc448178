"""Recognizers: which problem kind (with which real shape) a piece of a profiled model is.

The profiler turns a torch.profiler trace into a tree of :class:`Node` s: *scopes* (one call
of an ``nn.Module`` or of a marked function such as ``apply_rotary``, recorded by the
profiler's hooks) and *ops* (aten ops, with their input shapes).  Two kinds of recognizer
look at that tree:

* scope recognizers claim everything that runs inside a module call: an ``RMSNorm`` module is
  one ``rmsnorm`` problem whatever aten ops it is made of; a SwiGLU MLP claims its
  elementwise part (``swiglu``) and leaves its linears to the matmul recognizer — or claims
  the whole MLP as ``fused_mlp``;
* pair recognizers claim two neighbouring calls as one fused kind: a linear module (with a
  bias or without) directly followed by a GELU module is one ``linear_gelu``, by an ``nn.ReLU`` (or
  a ``torch.relu`` call) one ``linear_relu``, by a squared ReLU (a module that runs relu then
  square, or ``torch.square(torch.relu(...))`` calls) one ``linear_relu2``
  (``pair_linear_activation``), an add
  directly followed by a norm one ``add_<norm>``, ``log_softmax`` + ``nll_loss`` one
  ``cross_entropy``; attention written out op by op (scores, bias and mask, softmax, @ v: MPT's;
  BLOOM's, from baddbmm to bmm; GPT-Neo's, its mask by where; DeBERTa-v2's, from the keys' scale
  to bmm) is one ``attention_masked`` (``recognize_scores``);
* op recognizers map one aten op (``aten::linear``, ``aten::scaled_dot_product_attention``,
  ``aten::_softmax``...) to a kind, reading shapes and scalar arguments from the trace.

A recognizer returns an :class:`Instance` (a kind, dtype and shapes), an :class:`Unsupported`
(recognized, but not something a built-in kind computes: the time is reported as uncovered,
under that label), or None.  Everything here is plain data and pure functions, so it can be
tested on hand-made trees.
"""
from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .head_copies import writes_head_copies
from .problems.base import FLAG_DIMS

# The dimensions of each built-in problem kind, in order (mirrors problems/<kind>.py).
KIND_DIMS: dict[str, tuple[str, ...]] = {
    "matmul": ("M", "N", "K"),
    "attention": ("B", "H", "Hkv", "S", "D", "causal"),
    "attention_masked": ("B", "H", "Hkv", "S", "D", "additive", "per_query"),
    "attention_rotary": ("B", "H", "Hkv", "S", "D", "causal"),
    "attention_softcap": ("B", "H", "Hkv", "S", "D", "additive", "per_query"),
    "attention_sinks": ("B", "H", "Hkv", "S", "D", "additive", "per_query"),
    "attention_cross": ("B", "H", "Hkv", "Sq", "Sk", "D", "masked", "additive", "per_query"),
    "rotary": ("B", "H", "S", "D"),
    "rotary_interleaved": ("B", "H", "S", "D"),
    "rotary_pairs_to_halves": ("B", "H", "S", "D"),
    "rmsnorm": ("M", "N"),
    "layernorm": ("M", "N"),
    "softmax": ("M", "N"),
    "swiglu": ("M", "N"),
    "reduce": ("M", "N"),
    "fused_mlp": ("M", "D", "H"),
    "cross_entropy": ("M", "V"),
    "add_rmsnorm": ("M", "N"),
    "add_layernorm": ("M", "N"),
    "gelu": ("M", "N", "tanh"),
    "geglu": ("M", "N", "tanh"),
    "swiglu_packed": ("M", "N"),
    "geglu_packed": ("M", "N", "tanh"),
    "embedding": ("M", "V", "N"),
    "rotary_table": ("B", "S", "D"),
    "linear_gelu": ("M", "N", "K", "tanh"),
    "linear_relu": ("M", "N", "K"),
    "linear_relu2": ("M", "N", "K"),
    "moe_experts": ("T", "K", "E", "D", "I"),
    "softcap": ("M", "N"),
    "xielu": ("M", "N"),
    "shifted_windows": ("B", "H", "W", "C", "window", "shift", "reverse"),
    "window_bias": ("B", "H", "W", "heads", "window", "shift"),
    "moe_experts_gptoss": ("T", "K", "E", "D", "I"),
    "relative_position_bias": ("H", "Sq", "Sk", "NB", "bidirectional"),
    "selective_scan": ("B", "D", "L", "N"),
    "causal_conv1d": ("B", "D", "L", "K", "silu"),
}

# Dimensions a kind's shape has after those only where they apply (problems/<kind>.py's
# ``OPTIONAL_DIMS``): attention's value head dim, where v's is not q's.
OPTIONAL_KIND_DIMS: dict[str, tuple[str, ...]] = {"attention": ("Dv",)}

PROFILER_DTYPES = {
    "float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64",
    "BFloat16": "bf16", "Half": "fp16",
}

MATMUL_OPS = {"aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "aten::baddbmm"}
# op -> (index of is_causal, index of the mask argument or None)
ATTENTION_OPS: dict[str, tuple[int, int | None]] = {
    "aten::scaled_dot_product_attention": (5, 3),
    "aten::_scaled_dot_product_flash_attention": (4, None),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (4, 5),
    "aten::_scaled_dot_product_efficient_attention": (6, 3),
    "aten::_scaled_dot_product_cudnn_attention": (6, 3),
    "aten::_scaled_dot_product_attention_math": (5, 3),
}
SOFTMAX_OPS = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax"}
# aten::softmax's ``dtype`` argument as the profiler records it (ATen's ScalarType codes)
_SOFTMAX_DTYPES = {5: "fp16", 6: "fp32", 7: "fp64", 15: "bf16"}
NLL_OPS = ("aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss2d")
VIEW_OPS = {"aten::view", "aten::reshape", "aten::_unsafe_view", "aten::flatten", "aten::contiguous",
            "aten::transpose", "aten::select", "aten::slice", "aten::to", "aten::t", "aten::expand",
            "aten::as_strided", "aten::detach", "aten::alias"}
SILU_OPS = {"aten::silu", "aten::silu_"}
RELU_OPS = {"aten::relu", "aten::relu_"}
SQUARE_OPS = {"aten::square", "aten::pow"}  # torch.square runs as aten::square (aten::pow under it)
GELU_OPS = {"aten::gelu", "aten::gelu_", "aten::tanh", "aten::erf"}
# Ops that launch no device kernel (views, metadata, allocation, eval-mode dropout): on a GPU
# they own no time; on a CPU their self time is dispatcher overhead, left out of the total so
# that CPU shares mirror GPU ones.  (Where one of them copies, the copy is a child op and counts.)
METADATA_OPS = VIEW_OPS | {
    "aten::chunk", "aten::split", "aten::split_with_sizes", "aten::unsqueeze", "aten::squeeze", "aten::permute",
    "aten::unbind", "aten::narrow", "aten::view_as", "aten::expand_as", "aten::unflatten", "aten::_reshape_alias",
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg",
    "aten::lift_fresh", "aten::dropout", "aten::feature_dropout", "aten::_to_copy_noop", "aten::numpy_T",
    "aten::movedim", "aten::split_with_sizes_copy_noop", "aten::type_as", "aten::is_nonzero",
}
GEMM_KERNEL_MARKERS = ("nvjet", "gemm", "cutlass", "cublas", "xmma", "wgmma", "hgemm", "sgemm")

HEAD_ATTRS = ("n_heads", "num_heads", "n_head", "num_attention_heads")
KV_HEAD_ATTRS = ("n_kv_heads", "num_key_value_heads", "num_kv_heads", "n_kv_head", "n_head_kv", "kv_heads")
# a gated MLP's linears by their names, for the profiler and for apply alike (apply's own list
# lacked T5's wi_0 and wi_1: flan-T5's geglu was planned and never placed)
MLP_NAMES = {
    "gate": ("gate_proj", "gate", "w1", "fc_gate", "wi_0", "gate_linear", "w_gate", "wg"),
    "up": ("up_proj", "up", "w3", "fc_up", "wi_1", "up_linear", "w_up", "wu"),
    "down": ("down_proj", "down", "w2", "fc_down", "wo", "down_linear", "w_down", "out_proj"),
}


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str  # "bf16", "fp32", ...


@dataclass
class ModuleInfo:
    """What the recognizers need to know about one nn.Module, read once before profiling."""

    qualname: str
    cls_name: str
    is_layernorm: bool = False
    heads: int | None = None
    kv_heads: int | None = None
    eps: float | None = None
    mlp: dict[str, str] | None = None  # {"gate": name, "up": name, "down": name}
    mlp_dims: tuple[int, int] | None = None  # (D, H)
    packed_mlp: tuple[int, int] | None = None  # (D, H) of a gate_up D -> 2H and a down H -> D linear
    gelu_tanh: bool | None = None  # a GELU activation module: its form (True: tanh approximation)
    relu: bool = False  # an nn.ReLU (its own forward)
    residual_norm: tuple[str, str, str] | None = None  # (kind, linear, norm) of norm(linear(h) + residual)
    patch_conv: tuple[int, int] | None = None  # a Conv2d with stride = kernel (ViT patches): (kh, kw)
    window_conv1d: tuple[int, int, int] | None = None  # (kernel, stride, padding) of a Conv1d run as a GEMM
    scaled_embedding: tuple[int, int, float] | None = None  # (V, N, scale) of an embedding times a constant
    rotary_table: bool = False  # a *RotaryEmbedding module computing cos/sin from position ids (default RoPE)
    linear: tuple[int, int, bool] | None = None  # (K, N, weight stored [K, N]) of a linear layer (``linear_dims``)
    bias_free: bool = False  # that linear adds no bias (T5's ``wi``)
    linear_out: int | None = None  # N of a linear layer's output, also of one apply switched (``linear_out``)
    moe_experts: tuple[int, int, int] | None = None  # (E, D, I) of a module holding SwiGLU experts as 3-D weights
    experts_layout: str | None = None  # why a module holding experts as 3-D weights is not moe_experts
    experts_blocks: bool = False  # its moe_experts are DBRX's: [E x I, D] blocks, hidden states of any rank
    gptoss_experts: tuple[int, int, int] | None = None  # (E, D, I) of GPT-OSS's clamped, biased GLU experts
    relative_bias: tuple[int, int, bool] | None = None  # (buckets, max_distance, bidirectional) of T5's bias table
    xielu: bool = False  # an xIELU activation module (``is_xielu_module``: Apertus' MLP)
    head_copies: bool = False  # its forward copies q/k/v heads before attention (``head_copies``: Whisper's)
    shifted_windows: bool = False  # a Swin layer (``recognize_windows.is_shifted_window_layer``)
    window_bias_table: bool = False  # Swin's relative position bias module (``recognize_windows``)


@dataclass
class ScopeCall:
    """One call of a module or of a marked function."""

    kind: str  # "module" | "function"
    name: str  # module qualname, or "python.module.function"
    info: ModuleInfo | None = None
    args: list[TensorMeta] = field(default_factory=list)
    outputs: list[TensorMeta] = field(default_factory=list)
    code_names: tuple[str, ...] = ()  # names a marked function's code refers to


@dataclass(eq=False)
class Node:
    """An event of the profile: a scope (``scope`` set) or an op."""

    name: str
    shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    concrete: list[Any] = field(default_factory=list)
    self_us: float = 0.0  # self CPU time
    kernels: list[tuple[str, float]] = field(default_factory=list)  # device kernels it launched
    children: list["Node"] = field(default_factory=list)
    scope: ScopeCall | None = None
    parent: "Node | None" = None

    def add(self, child: "Node") -> "Node":
        child.parent = self
        self.children.append(child)
        return child


@dataclass
class Instance:
    """One recognized call: a kind, a dtype and its shapes (each with a multiplicity)."""

    kind: str
    dtype: str
    shapes: list[tuple[dict[str, int], int]]
    module: str = ""
    notes: tuple[str, ...] = ()
    add_from: str = ""  # an add_<norm> whose add ends another module's forward: that module


@dataclass(frozen=True)
class Unsupported:
    label: str


# ------------------------------------------------------------------ helpers
def profiler_dtype(text: str | None, default: str) -> str:
    if not text:
        return default
    return PROFILER_DTYPES.get(text, text.replace("c10::", "").lower())


def make_shape(kind: str, *values: int) -> dict[str, int]:
    return dict(zip(KIND_DIMS[kind], (int(v) for v in values)))


def shape_weight(shape: dict[str, int]) -> float:
    return float(math.prod(max(v, 1) for k, v in shape.items() if k not in FLAG_DIMS))


def rows(shape: tuple[int, ...] | list[int]) -> int:
    return int(math.prod(shape[:-1])) if len(shape) else 1


def same_rows(a: list[int] | tuple[int, ...] | None, b: list[int] | tuple[int, ...]) -> bool:
    """Are shapes ``a`` and ``b`` the same rows, as a norm over the last dimension reads them:
    equal, or leading dimensions merged or split, the width kept (OPT's ``x.reshape(-1,
    x.size(-1))``)?  Not the same number of dimensions in another order: that may be a transpose."""
    if not a or not b or list(a) == list(b):
        return bool(a) and bool(b)
    return len(a) != len(b) and a[-1] == b[-1] and math.prod(a) == math.prod(b)


def _arg(node: Node, i: int) -> list[int] | None:
    return list(node.shapes[i]) if i < len(node.shapes) and node.shapes[i] else None


def _concrete(node: Node, i: int) -> Any:
    return node.concrete[i] if i < len(node.concrete) else None


def _dtype(node: Node, i: int, default: str) -> str:
    return profiler_dtype(node.dtypes[i] if i < len(node.dtypes) else None, default)


def _first_int(obj: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def module_info(qualname: str, module: nn.Module) -> ModuleInfo:
    from .recognize_windows import is_shifted_window_layer, is_window_bias_module  # it imports this module

    config = getattr(module, "config", None)
    heads = _first_int(module, HEAD_ATTRS) or _first_int(config, HEAD_ATTRS)
    kv = _first_int(module, KV_HEAD_ATTRS) or _first_int(config, KV_HEAD_ATTRS)
    groups = _first_int(module, ("num_key_value_groups",))
    if kv is None and heads and groups:
        kv = heads // groups
    eps = getattr(module, "eps", None)
    if eps is None:
        eps = getattr(module, "variance_epsilon", None)
    mlp, dims = mlp_linears(module)
    experts, other_experts = _experts_layout(module)
    blocks, other_blocks = _experts_blocks_layout(module)
    experts, other_experts = experts or blocks, other_experts or other_blocks
    gptoss = gptoss_experts_dims(module)
    if gptoss is not None:
        other_experts = None
    linear = linear_dims(module)
    return ModuleInfo(qualname=qualname, cls_name=type(module).__name__,
                      is_layernorm=isinstance(module, nn.LayerNorm), heads=heads, kv_heads=kv,
                      eps=float(eps) if isinstance(eps, (int, float)) else None, mlp=mlp, mlp_dims=dims,
                      packed_mlp=packed_mlp_dims(module), gelu_tanh=gelu_form(module), relu=is_relu_module(module),
                      residual_norm=residual_norm_parts(module), patch_conv=patch_conv_kernel(module),
                      window_conv1d=window_conv1d_parts(module),
                      scaled_embedding=scaled_embedding_parts(module), rotary_table=is_rotary_table(module),
                      linear=linear, bias_free=linear is not None and module.bias is None,
                      linear_out=linear_out(module), moe_experts=experts,
                      experts_layout=other_experts, experts_blocks=blocks is not None, gptoss_experts=gptoss,
                      relative_bias=relative_bias_parts(module), xielu=is_xielu_module(module),
                      head_copies=writes_head_copies(type(module)), shifted_windows=is_shifted_window_layer(module),
                      window_bias_table=is_window_bias_module(module))


def linear_out(module: nn.Module) -> int | None:
    """N, the width of a linear layer's output (``linear_dims``), also where ``apply`` switched
    it to the matmul op (its class is then no longer ``nn.Linear``'s own forward; it keeps the
    weight as a [K, N] buffer, ``_autokernel_weight_t``): a patched model's profile still
    finds the row added onto its output (``pair_linear_row_add``).  None for anything else."""
    dims = linear_dims(module)
    if dims is not None:
        return dims[1]
    wt = getattr(module, "_autokernel_weight_t", None)
    if (isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D") and isinstance(wt, torch.Tensor) \
            and wt.dim() == 2:
        return int(wt.shape[1])
    return None


def linear_dims(module: nn.Module) -> tuple[int, int, bool] | None:
    """(K, N, transposed) of a linear layer: ``nn.Linear`` (weight [N, K]), with a bias or without
    one (T5's ``wi``: the epilogue kinds hand their kernel zeros), or GPT-2's ``Conv1D`` (``x @
    weight + bias``, weight stored [K, N]: transposed).  None for anything else.  A subclass of
    ``nn.Linear`` with a forward of its own (Falcon's ``FalconLinear``: ``x @ W.T + b``) is taken
    at its word here: ``apply`` runs it on a probe before it switches it."""
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return None
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dim() != 1):
        return None
    if isinstance(module, nn.Linear):
        n, k = weight.shape
        return (int(k), int(n), False) if bias is None or bias.shape[0] == n else None
    if (type(module).__name__ == "Conv1D" and bias is not None
            and getattr(module, "nf", None) == weight.shape[1] == bias.shape[0]):
        return int(weight.shape[0]), int(weight.shape[1]), True
    return None


def relative_bias_parts(module: nn.Module) -> tuple[int, int, bool] | None:
    """(buckets, max_distance, bidirectional) of an attention module that holds T5's relative
    position bias table (``relative_attention_bias``, an ``nn.Embedding`` of ``buckets`` rows, one
    column a head) and computes the bias in its ``compute_bias``: bidirectional unless it is a
    decoder's.  None for anything else.  ``apply`` probes what ``compute_bias`` computes."""
    table = getattr(module, "relative_attention_bias", None)
    buckets = getattr(module, "relative_attention_num_buckets", None)
    max_distance = getattr(module, "relative_attention_max_distance", None)
    decoder = getattr(module, "is_decoder", None)
    if (not isinstance(table, nn.Embedding) or not callable(getattr(module, "compute_bias", None))
            or not isinstance(decoder, bool) or any(not isinstance(v, int) or isinstance(v, bool)
                                                    for v in (buckets, max_distance))
            or table.num_embeddings != buckets):
        return None
    return int(buckets), int(max_distance), not decoder


def module_wrapped_function(value: Any) -> Any:
    """The plain function behind a function made into a module, else ``value``.  transformers
    (5.25 on, which installs the ``kernels`` package) decorates ``apply_rotary_pos_emb`` with
    ``use_kernel_forward_from_hub``: the module's global is then an ``nn.Module`` instance whose
    class's ``forward`` calls the function it closes over (and, in a model kernelized from the
    hub, something else, which our probe of the whole object would see)."""
    if isinstance(value, types.FunctionType) or not isinstance(value, nn.Module):
        return value
    forward = vars(type(value)).get("forward")
    functions = []
    for cell in getattr(forward, "__closure__", None) or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(contents, types.FunctionType):
            functions.append(contents)
    return functions[0] if len(functions) == 1 else value


def rotary_table_freqs(module: nn.Module) -> dict[str | None, str] | None:
    """The frequency buffers of a rotary-embedding module of the Hugging Face kind, by the
    ``layer_type`` its forward takes: ``{None: "inv_freq"}`` for one table (``forward(x,
    position_ids) -> (cos, sin)``, checked on the call), ``{"full_attention":
    "full_attention_inv_freq", ...}`` for one per layer type (ModernBERT's global and local
    RoPE, two bases: ``forward(x, position_ids, layer_type)``, a ``<type>_attention_scaling``
    each).  Each a 1-D floating buffer (fp32 as built; a ``model.to(dtype)`` casts it, and the
    module still takes the angles in fp32 from the rounded frequencies); default RoPE only (the
    dynamic variants change the frequencies with the sequence length).  None for anything else."""
    if "rotary" not in type(module).__name__.lower() or any(True for _ in module.children()):
        return None
    rope_type = getattr(module, "rope_type", "default")

    def is_freq(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() == 1 and t.is_floating_point()

    if is_freq(getattr(module, "inv_freq", None)):
        return {None: "inv_freq"} if rope_type == "default" else None
    types_ = getattr(module, "layer_types", None)
    if (not isinstance(rope_type, dict) or not isinstance(types_, (list, tuple)) or not types_
            or set(rope_type) != set(types_) or any(v != "default" for v in rope_type.values())):
        return None
    found = {t: f"{t}_inv_freq" for t in types_}
    if not all(isinstance(t, str) and is_freq(getattr(module, b, None)) for t, b in found.items()):
        return None
    return found


def is_rotary_table(module: nn.Module) -> bool:
    """A rotary-embedding module whose cos/sin tables ``rotary_table`` computes (``rotary_table_freqs``)."""
    return rotary_table_freqs(module) is not None


def embedding_scale(module: nn.Module) -> float | None:
    """The constant an ``nn.Embedding`` multiplies its rows by: 1 for ``nn.Embedding`` itself,
    the scale of a subclass that keeps one (Gemma's ``embed_scale`` / ``scalar_embed_scale``),
    None for anything else (another forward, or ``max_norm``, which renormalises the table)."""
    if not isinstance(module, nn.Embedding) or module.max_norm is not None:
        return None
    if type(module).forward is nn.Embedding.forward:
        return 1.0
    for attr in ("scalar_embed_scale", "embed_scale", "embedding_scale", "scale"):
        value = getattr(module, attr, None)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return float(value.to(module.weight.dtype))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(torch.tensor(float(value), dtype=module.weight.dtype))
    return None


def scaled_embedding_parts(module: nn.Module) -> tuple[int, int, float] | None:
    scale = embedding_scale(module)
    if scale is None or type(module).forward is nn.Embedding.forward:
        return None  # a plain embedding is its aten::embedding op
    return int(module.num_embeddings), int(module.embedding_dim), scale


def patch_conv_kernel(module: nn.Module) -> tuple[int, int] | None:
    """A patch-embedding convolution (ViT): non-overlapping patches, so the convolution is a
    GEMM of the flattened patches [B*patches, C*kh*kw] by the weight [C*kh*kw, out]."""
    if not isinstance(module, nn.Conv2d):
        return None
    k = tuple(module.kernel_size)
    if (tuple(module.stride) != k or module.groups != 1 or tuple(module.dilation) != (1, 1)
            or module.padding not in ((0, 0), 0, "valid")):
        return None
    return int(k[0]), int(k[1])


def window_conv1d_parts(module: nn.Module) -> tuple[int, int, int] | None:
    """(kernel, stride, padding) of an ``nn.Conv1d`` that is the GEMM of its unfolded windows
    (Whisper's encoder stems): one group, no dilation, zero padding given as a number.  Its windows
    [B*L_out, C*k] times the weight [C*k, out] are its output, channels last in memory."""
    if not isinstance(module, nn.Conv1d) or type(module).forward is not nn.Conv1d.forward:
        return None
    padding = module.padding
    if (module.groups != 1 or tuple(module.dilation) != (1,) or module.padding_mode != "zeros"
            or isinstance(padding, str)):
        return None
    return int(module.kernel_size[0]), int(module.stride[0]), int(padding[0])


def residual_norm_parts(module: nn.Module) -> tuple[str, str, str] | None:
    """A post-norm output block (BERT's ``BertSelfOutput``/``BertOutput``, ViT's... ):
    one linear, one norm and nothing else but dropout, called as ``forward(h, residual)`` to
    compute ``norm(dropout(linear(h)) + residual)``.  Returns (add_<norm kind>, linear, norm)."""
    children = dict(module.named_children())
    linears = [n for n, c in children.items() if isinstance(c, nn.Linear)]
    norms = [n for n, c in children.items() if type(c).__name__.lower().endswith(("layernorm", "rmsnorm"))]
    rest = [c for n, c in children.items() if n not in linears and n not in norms]
    if len(linears) != 1 or len(norms) != 1 or any(not isinstance(c, (nn.Dropout, nn.Identity)) for c in rest):
        return None
    kind = "add_layernorm" if isinstance(children[norms[0]], nn.LayerNorm) else "add_rmsnorm"
    return kind, linears[0], norms[0]


def gelu_form(module: nn.Module) -> bool | None:
    """For a GELU activation module (``nn.GELU``, transformers' ``GELUActivation``,
    ``NewGELUActivation``, ``GELUTanh``...): True for the tanh approximation, False for erf.
    None for anything else."""
    name = type(module).__name__.lower()
    if "gelu" not in name or any(True for _ in module.children()):
        return None
    approximate = getattr(module, "approximate", None)
    if isinstance(approximate, str):
        return approximate == "tanh"
    return "tanh" in name or name.startswith(("newgelu", "fastgelu")) or "pytorchgelutanh" in name


def is_relu_module(module: Any) -> bool:
    """``nn.ReLU`` with its own forward (transformers' ``ACT2FN["relu"]``); ReLU6, leaky and squared
    ReLUs are other functions."""
    return isinstance(module, nn.ReLU) and type(module).forward is nn.ReLU.forward


_RELU2_PROBE = (-3.0, -1.5, -0.25, 0.0, 0.25, 0.5, 1.5, 3.0)  # squares exact in every dtype


def is_relu2_module(module: Any) -> bool:
    """A squared ReLU activation module (transformers' ``ReLUSquaredActivation``,
    ``ACT2FN["relu2"]``): a leaf module without parameters or buffers, not an ``nn.ReLU``, whose
    call on a few signed values gives relu(x)**2 exactly.  (The appliers then probe the pair
    against the reference; the profiler reads what its call ran instead.)"""
    if (not isinstance(module, nn.Module) or isinstance(module, nn.ReLU) or any(True for _ in module.children())
            or any(True for _ in module.parameters()) or any(True for _ in module.buffers())):
        return False
    x = torch.tensor(_RELU2_PROBE)
    try:
        with torch.no_grad():
            got = module(x)
    except Exception:  # a module that does not take one tensor is no activation
        return False
    return isinstance(got, torch.Tensor) and got.shape == x.shape and torch.equal(got, x.clamp(min=0) ** 2)


XIELU_ATTRS = ("alpha_p", "alpha_n", "beta", "eps")


def is_xielu_module(module: Any) -> bool:
    """An xIELU activation module (transformers' ``XIELUActivation``, ``ACT2CLS["xielu"]``: Apertus'
    MLP): a leaf module holding one-element floating tensors ``alpha_p``, ``alpha_n``, ``beta`` and
    ``eps``.  ``apply`` probes what its forward computes against the reference, with the numbers
    ``xielu_scalars`` reads, before it switches it."""
    if not isinstance(module, nn.Module) or any(True for _ in module.children()):
        return False
    values = [getattr(module, name, None) for name in XIELU_ATTRS]
    return all(isinstance(v, torch.Tensor) and v.numel() == 1 and v.is_floating_point() for v in values)


def xielu_scalars(module: nn.Module) -> tuple[float, float, float, float]:
    """(alpha_p, alpha_n, beta, eps) of an xIELU module as its forward computes them:
    ``softplus(alpha_p)`` and ``beta + softplus(alpha_n)`` in the parameters' dtype (rounded
    there), ``beta`` and ``eps`` its buffers' values."""
    with torch.no_grad():
        alpha_p = torch.nn.functional.softplus(module.alpha_p)
        alpha_n = module.beta + torch.nn.functional.softplus(module.alpha_n)
        return float(alpha_p.reshape(())), float(alpha_n.reshape(())), float(module.beta), float(module.eps)


def is_silu_module(module: Any) -> bool:
    """``nn.SiLU``, or a leaf activation module named like one (transformers' ``SiLUActivation``);
    the appliers probe what it computes."""
    return isinstance(module, nn.SiLU) or (isinstance(module, nn.Module) and "silu" in type(module).__name__.lower()
                                           and not any(True for _ in module.children()))


# transformers' marks of an experts layout (``use_experts_implementation``): moe_experts' value, and
# what another value means
_EXPERTS_MARKS = {"is_transposed": (False, "transposed"), "is_concatenated": (True, "interleaved gate/up"),
                  "has_bias": (False, "biased"), "has_gate": (True, "no gate"),
                  "has_post_expert_norm": (False, "a norm after each expert")}


def _experts_layout(module: nn.Module) -> tuple[tuple[int, int, int] | None, str | None]:
    """For a module holding 3-D ``gate_up_proj`` and ``down_proj`` weights: (its (E, D, I), None)
    in the moe_experts layout, else (None, what sets it apart: GPT-OSS's transposed, interleaved,
    biased experts; Llama 4's [E, D, 2I]); (None, None) for any other module.  Experts in another
    layout are no `matmul`s apply could switch: the profile lists them uncovered with the reason."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not (isinstance(gate_up, torch.Tensor) and isinstance(down, torch.Tensor)) or gate_up.dim() != 3 or down.dim() != 3:
        return None, None
    why = [text for name, (usual, text) in _EXPERTS_MARKS.items() if getattr(module, name, usual) != usual]
    if "biased" not in why and getattr(module, "gate_up_proj_bias", None) is not None:
        why.append("biased")
    if "no gate" not in why and not is_silu_module(getattr(module, "act_fn", None)):
        why.append("not SiLU")
    E, two_i, D = gate_up.shape
    if not why and (two_i % 2 or tuple(down.shape) != (E, D, two_i // 2)):
        why.append(f"gate_up_proj {list(gate_up.shape)}, down_proj {list(down.shape)}")
    return (None, ", ".join(why)) if why else ((int(E), int(D), int(two_i // 2)), None)


def moe_experts_dims(module: nn.Module) -> tuple[int, int, int] | None:
    """(E, D, I) of a mixture-of-experts experts module in the layout Mixtral's and Qwen-MoE's
    share (transformers' experts with 3-D weights): ``gate_up_proj`` [E, 2I, D] (gate rows
    first), ``down_proj`` [E, D, I], no biases, a SiLU ``act_fn``; its forward takes
    (hidden [T, D], top_k_index [T, K], top_k_weights [T, K]).  Transposed, interleaved, biased
    and gate-less layouts (``is_transposed``, ``is_concatenated``... as transformers marks
    them) are not this kind."""
    return _experts_layout(module)[0]


def _experts_blocks_layout(module: nn.Module) -> tuple[tuple[int, int, int] | None, str | None]:
    """For experts that keep each projection as one [E x I, D] block (DBRX's ``DbrxExperts``: its
    ``mlp`` holds ``w1`` (gate) and ``v1`` (up), each expert's x @ w[e].T, and ``w2`` (down),
    h @ w2[e]; ``num_experts`` E and ``ffn_hidden_size`` I): (its (E, D, I), None) with a SiLU
    ``activation_fn``, as moe_experts computes them once the blocks are packed ([E, 2I, D] gate and
    up, [E, D, I] down: ``integrate.experts``); (None, why) with another activation; (None, None)
    for any other module.  Its forward takes hidden states [B, S, D] (any rank: their rows are the
    tokens), top_k_index and top_k_weights [T, K]."""
    glu = getattr(module, "mlp", None)
    E, I = getattr(module, "num_experts", None), getattr(module, "ffn_hidden_size", None)
    if not (isinstance(glu, nn.Module) and isinstance(E, int) and isinstance(I, int)) or E < 1 or I < 1:
        return None, None
    blocks = [getattr(glu, n, None) for n in ("w1", "v1", "w2")]
    if not all(isinstance(w, torch.Tensor) and w.dim() == 2 and w.shape == blocks[0].shape for w in blocks) \
            or blocks[0].shape[0] != E * I:
        return None, None
    if not is_silu_module(getattr(glu, "activation_fn", None)):
        return None, f"[E x I, D] blocks, not SiLU ({type(getattr(glu, 'activation_fn', None)).__name__})"
    return (E, int(blocks[0].shape[1]), I), None


def experts_blocks_dims(module: nn.Module) -> tuple[int, int, int] | None:
    """(E, D, I) of SiLU experts kept as [E x I, D] blocks (DBRX's: ``_experts_blocks_layout``)."""
    return _experts_blocks_layout(module)[0]


def gptoss_experts_dims(module: nn.Module) -> tuple[int, int, int] | None:
    """(E, D, I) of experts in GPT-OSS's layout (``moe_experts_gptoss``): ``gate_up_proj`` [E, D, 2I]
    (x @ W, gate and up interleaved) with ``gate_up_proj_bias`` [E, 2I], ``down_proj`` [E, I, D] with
    ``down_proj_bias`` [E, D], and the GLU's ``alpha`` and ``limit`` as numbers.  What the forward
    computes is probed when ``apply`` switches it."""
    names = ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")
    gate_up, gate_up_bias, down, down_bias = (getattr(module, n, None) for n in names)
    if not all(isinstance(t, torch.Tensor) for t in (gate_up, gate_up_bias, down, down_bias)):
        return None
    if not all(isinstance(getattr(module, n, None), (int, float)) for n in ("alpha", "limit")):
        return None
    if gate_up.dim() != 3 or gate_up.shape[2] % 2:
        return None
    E, D, two_i = gate_up.shape
    I = two_i // 2
    if (tuple(gate_up_bias.shape), tuple(down.shape), tuple(down_bias.shape)) != ((E, two_i), (E, I, D), (E, D)):
        return None
    return int(E), int(D), int(I)


def packed_mlp_parts(module: nn.Module) -> tuple[str, str, int, int] | None:
    """(packed name, down name, D, H) of a packed gated MLP: exactly two linear children, one
    D -> 2H (both halves of the gate, Phi-3's ``gate_up_proj``, ModernBERT's ``Wi``) and one
    H -> D.  Found by the shapes, whatever the names or the order (the two cannot both fit:
    that would need 2H = H)."""
    linears = {n: m for n, m in module.named_children() if isinstance(m, nn.Linear)}
    if len(linears) != 2:
        return None
    for packed, down in (tuple(linears), tuple(reversed(tuple(linears)))):
        two_h, d = linears[packed].weight.shape
        if two_h % 2 == 0 and two_h > 0 and tuple(linears[down].weight.shape) == (d, two_h // 2):
            return packed, down, int(d), int(two_h // 2)
    return None


def packed_mlp_dims(module: nn.Module) -> tuple[int, int] | None:
    """(D, H) of a packed gated MLP (``packed_mlp_parts``)."""
    parts = packed_mlp_parts(module)
    return None if parts is None else parts[2:]


def mlp_linears(module: nn.Module) -> tuple[dict[str, str] | None, tuple[int, int] | None]:
    """Find gate/up/down linears of a SwiGLU-shaped MLP: gate and up map D -> H, down H -> D."""
    linears = {n: m for n, m in module.named_children() if isinstance(m, nn.Linear)}
    if len(linears) < 3:
        return None, None
    found: dict[str, str] = {}
    for role, names in MLP_NAMES.items():
        name = next((n for n in names if n in linears), None)
        if name is not None:
            found[role] = name
    if len(found) < 3 or len(set(found.values())) < 3:
        # No familiar names: two linears D -> H and one H -> D, in definition order.
        items = list(linears.items())
        found = {}
        for i, (a, la) in enumerate(items):
            for b, lb in items[i + 1:]:
                if la.weight.shape == lb.weight.shape:
                    down = next((n for n, l in items if n not in (a, b)
                                 and l.weight.shape == la.weight.shape[::-1]), None)
                    if down is not None:
                        found = {"gate": a, "up": b, "down": down}
                        break
            if found:
                break
        if not found:
            return None, None
    gate, up, down = (linears[found[r]] for r in ("gate", "up", "down"))
    H, D = gate.weight.shape
    if up.weight.shape != (H, D) or down.weight.shape != (D, H):
        return None, None
    return found, (int(D), int(H))


def matmul_shape(a: list[int], b: list[int]) -> tuple[dict[str, int], int] | None:
    """(M,N,K) and a multiplicity for ``a @ b`` (batched matmuls count one call per batch)."""
    if not a or not b:
        return None
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    if a[-1] != b[-2]:
        return None
    if len(b) == 2:
        return make_shape("matmul", rows(a), b[-1], a[-1]), 1
    batch_a, batch_b = a[:-2], b[:-2]
    try:
        batch = torch.broadcast_shapes(tuple(batch_a), tuple(batch_b))
    except RuntimeError:
        return None
    return make_shape("matmul", a[-2], b[-1], a[-1]), int(math.prod(batch))


# ------------------------------------------------------------------ op recognizers
def recognize_op(node: Node, default_dtype: str) -> Instance | Unsupported | None:
    name = node.name
    if name in MATMUL_OPS:
        return _matmul(node, default_dtype)
    if name in ATTENTION_OPS:
        return _attention(node, default_dtype)
    if name in SOFTMAX_OPS:
        x, dim = _arg(node, 0), _concrete(node, 1)
        if x is None:
            return None
        if isinstance(dim, int) and dim not in (-1, len(x) - 1):
            return Unsupported(f"{name} (not over the last dim)")
        # ``F.softmax(x, dim, dtype=torch.float)`` (the MoE routers'): computed in that dtype
        computed = _SOFTMAX_DTYPES.get(_concrete(node, 2)) if name == "aten::softmax" else None
        return Instance("softmax", computed or _dtype(node, 0, default_dtype),
                        [(make_shape("softmax", rows(x), x[-1]), 1)])
    if name == "aten::cross_entropy_loss":
        x = _arg(node, 0)
        if x is None:
            return None
        m = x[0] if len(x) <= 2 else x[0] * math.prod(x[2:])
        v = x[1] if len(x) >= 2 else x[0]
        return Instance("cross_entropy", _dtype(node, 0, default_dtype), [(make_shape("cross_entropy", m, v), 1)])
    if name in ("aten::layer_norm", "aten::rms_norm"):
        x, norm = _arg(node, 0), _concrete(node, 1)
        if x is None:
            return None
        n = int(math.prod(norm)) if isinstance(norm, (list, tuple)) and norm else x[-1]
        kind = "layernorm" if name == "aten::layer_norm" else "rmsnorm"
        if n != x[-1]:
            return Unsupported(f"{name} (over several dims)")
        return Instance(kind, _dtype(node, 0, default_dtype), [(make_shape(kind, rows(x), n), 1)])
    if name in ("aten::gelu", "aten::gelu_"):
        x, approximate = _arg(node, 0), _concrete(node, 1)
        if x is None:
            return None
        marked = node.parent.name if node.parent is not None else ""
        tanh = 1 if approximate == "tanh" or marked == "ak::gelu::tanh" else 0
        return Instance("gelu", _dtype(node, 0, default_dtype), [(make_shape("gelu", rows(x), x[-1], tanh), 1)])
    if name == "aten::embedding":  # (weight[V,N], ids[...], padding_idx, ...)
        w, ids = _arg(node, 0), _arg(node, 1)
        if not w or len(w) != 2 or ids is None:
            return None
        return Instance("embedding", _dtype(node, 0, default_dtype),
                        [(make_shape("embedding", math.prod(ids), w[0], w[1]), 1)])
    if name == "aten::sum":
        x, dims = _arg(node, 0), _concrete(node, 1)
        if x and isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, len(x) - 1):
            return Instance("reduce", _dtype(node, 0, default_dtype), [(make_shape("reduce", rows(x), x[-1]), 1)])
    return None


def _matmul(node: Node, default_dtype: str) -> Instance | None:
    name = node.name
    notes: tuple[str, ...] = ()
    if name == "aten::linear":
        x, w = _arg(node, 0), _arg(node, 1)
        if not x or not w or len(w) != 2 or x[-1] != w[1]:
            return None
        found = (make_shape("matmul", rows(x), w[0], w[1]), 1)
        notes = ("nn.Linear calls: b is the weight transposed (weight stored [N,K])",)
    elif name in ("aten::addmm", "aten::baddbmm"):
        found = matmul_shape(_arg(node, 1) or [], _arg(node, 2) or [])
    else:
        found = matmul_shape(_arg(node, 0) or [], _arg(node, 1) or [])
    if found is None:
        return None
    if found[1] > 1:
        notes += ("batched matmuls counted as one call per batch entry",)
    dtype_index = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
    return Instance("matmul", _dtype(node, dtype_index, default_dtype), [found], notes=notes)


def _attention(node: Node, default_dtype: str) -> Instance | Unsupported | None:
    q, k = _arg(node, 0), _arg(node, 1)
    if not q or not k or len(q) != 4 or len(k) != 4:
        return None
    causal_index, mask_index = ATTENTION_OPS[node.name]
    mask = _arg(node, mask_index) if mask_index is not None else None
    v = _arg(node, 2)
    # DeepSeek's multi-head latent attention: q and k carry the rotary dims beside the others
    # (nope + rope), v does not.  `attention` takes a value head dim Dv of its own; the other
    # attention kinds take one head dim for q, k, v and the output.
    own_value_dim = bool(v) and len(v) == 4 and v[3] != q[3]
    if own_value_dim and (mask or q[2] != k[2]):
        return Unsupported(f"{node.name} (value head dim {v[3]} differs from the query/key head dim {q[3]}, as "
                           "in multi-head latent attention, with a mask or keys of another length: only "
                           "attention without a mask takes a value head dim of its own)")
    if q[2] != k[2]:
        return _cross_attention(node, q, k, mask, causal_index, mask_index, default_dtype)
    B, H, S, D = q
    form = None
    if mask:
        form = mask_form(mask, _dtype(node, mask_index, default_dtype), _dtype(node, 0, default_dtype), B, H, S)
        if form is None:
            return Unsupported(f"{node.name} (attn_mask {mask} {_dtype(node, mask_index, default_dtype)})")
    hkv, notes = _kv_heads(node, H, k[1])
    if form is not None:
        additive, per_query = form
        notes += (f"attn_mask {'x'.join(map(str, mask))} ({'additive' if additive else 'bool'})",)
        return Instance("attention_masked", _dtype(node, 0, default_dtype),
                        [(make_shape("attention_masked", B, H, hkv, S, D, additive, per_query), 1)], notes=notes)
    causal = 1 if _concrete(node, causal_index) is True else 0
    shape = make_shape("attention", B, H, hkv, S, D, causal)
    if own_value_dim:
        shape["Dv"] = int(v[3])
        notes += (f"value head dim {v[3]} beside the query/key head dim {D} (multi-head latent attention)",)
    return Instance("attention", _dtype(node, 0, default_dtype), [(shape, 1)], notes=notes)


def _kv_heads(node: Node, H: int, hkv: int) -> tuple[int, tuple[str, ...]]:
    """The kv heads of an SDPA call whose k has ``hkv`` heads: the enclosing module's, where it
    repeated fewer to H before the call."""
    if hkv == H:
        owner = _enclosing_module(node, lambda info: info.kv_heads is not None)
        if owner is not None and owner.kv_heads < H and H % owner.kv_heads == 0:
            return owner.kv_heads, (f"kv heads repeated to {H} before SDPA in {owner.cls_name} ({owner.kv_heads} kv heads)",)
    return hkv, ()


def _cross_attention(node: Node, q: list[int], k: list[int], mask: list[int] | None, causal_index: int,
                     mask_index: int | None, default_dtype: str) -> Instance | Unsupported:
    """An SDPA call whose query and key lengths differ (an encoder-decoder's cross-attention, Sq
    decoder queries against Sk encoder states): ``attention_cross`` when it is not causal (SDPA's
    causal mask with Sq != Sk is aligned top-left, which no model means) and its mask, if any, is
    one ``attention_cross`` takes."""
    if _concrete(node, causal_index) is True:
        return Unsupported(f"{node.name} (query and key lengths differ, causal)")
    B, H, Sq, D = q
    if k[3] != D or B != k[0]:
        return Unsupported(f"{node.name} (q {q}, k {k})")
    masked = additive = per_query = 0
    notes: tuple[str, ...] = ()
    if mask:
        mask_dtype = _dtype(node, mask_index, default_dtype)
        form = mask_form(mask, mask_dtype, _dtype(node, 0, default_dtype), B, H, Sq, keys=k[2])
        if form is None:
            return Unsupported(f"{node.name} (query and key lengths differ, attn_mask {mask} {mask_dtype})")
        masked, (additive, per_query) = 1, form
        notes = (f"attn_mask {'x'.join(map(str, mask))} ({'additive' if additive else 'bool'})",)
    hkv, kv_notes = _kv_heads(node, H, k[1])
    return Instance("attention_cross", _dtype(node, 0, default_dtype),
                    [(make_shape("attention_cross", B, H, hkv, Sq, k[2], D, masked, additive, per_query), 1)],
                    notes=kv_notes + notes)


def mask_form(mask: list[int], mask_dtype: str, q_dtype: str, B: int, H: int, S: int,
              keys: int | None = None) -> tuple[int, int] | None:
    """(additive, per_query) of an SDPA ``attn_mask`` the ``attention_masked`` problem takes:
    2 to 4 dimensions broadcastable to [B, H, S, S] (each leading one 1 or full), bool, in
    the query's dtype or fp32.  None for any other mask.  ``keys``: the key length where it
    differs from the query's (``attention_cross``: [B, H, Sq, Sk])."""
    if not 2 <= len(mask) <= 4 or mask[-1] != (S if keys is None else keys):
        return None
    full = [1] * (4 - len(mask)) + list(mask)
    if any(size not in (1, want) for size, want in zip(full[:3], (B, H, S))):
        return None
    if mask_dtype == "bool":
        return 0, int(full[2] != 1)
    if mask_dtype in (q_dtype, "fp32"):
        return 1, int(full[2] != 1)
    return None


def _enclosing_module(node: Node | None, want) -> ModuleInfo | None:
    while node is not None:
        if node.scope is not None and node.scope.info is not None and want(node.scope.info):
            return node.scope.info
        node = node.parent
    return None


def pair_cross_entropy(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """``log_softmax`` directly followed (views aside) by ``nll_loss`` among a node's
    children is one cross entropy: map both nodes (by id) to one instance."""
    out: dict[int, Instance] = {}
    kids = [c for c in parent.children if c.scope is None and c.name not in VIEW_OPS]
    for first, second in zip(kids, kids[1:]):
        if first.name in ("aten::log_softmax", "aten::_log_softmax") and second.name.startswith(NLL_OPS):
            x = _arg(first, 0)
            if not x:
                continue
            inst = Instance("cross_entropy", _dtype(first, 0, default_dtype),
                            [(make_shape("cross_entropy", rows(x), x[-1]), 1)])
            out[id(first)] = out[id(second)] = inst
    return out


def pair_rotary_attention(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """A rotary function applied to q and k (``apply_rotary*(q, k, cos, sin)``, rotate_half
    layout) directly followed (metadata ops aside: the kv heads' ``repeat_kv`` views) by an
    attention op without a mask on that q and k, both children of ``parent`` (one forward, as
    in the llama example and Hugging Face Llama-family attention): map both nodes (by id) to
    one ``attention_rotary`` instance."""
    out: dict[int, Instance] = {}
    kids = [c for c in parent.children if c.scope is not None or c.name not in METADATA_OPS]
    for first, second in zip(kids, kids[1:]):
        call = first.scope
        if call is None or call.kind != "function" or second.scope is not None or second.name not in ATTENTION_OPS:
            continue
        rotary = _rotary(call, first, default_dtype)
        attention = _attention(second, default_dtype)
        if (not isinstance(rotary, Instance) or rotary.kind != "rotary" or not isinstance(attention, Instance)
                or attention.kind != "attention"):
            continue
        q, k = call.args[0].shape if call.args else (), call.args[1].shape if len(call.args) > 1 else ()
        shape = attention.shapes[0][0]
        if (list(q) != _arg(second, 0) or len(k) != 4 or (k[0], k[2], k[3]) != (shape["B"], shape["S"], shape["D"])
                or k[1] != shape["Hkv"]):
            continue
        inst = Instance("attention_rotary", attention.dtype,
                        [(make_shape("attention_rotary", *shape.values()), 1)], module=rotary.module,
                        notes=(f"rotary on q and k ({rotary.notes[0]}) then {second.name}",) + attention.notes)
        out[id(first)] = out[id(second)] = inst
    return out


def pair_residual_adds(parent: Node) -> dict[int, Node]:
    """``s = a + b`` directly followed (views and metadata aside) by a norm module called on one
    tensor of the same rows (``same_rows``), both children of ``parent`` (one forward, as in
    ``x = x + h; y = norm(x)`` or ``norm(x + h)``): map the add (by id) to that norm scope, whose
    instance becomes an ``add_<norm>``.  Only element-wise adds of two tensors of one shape count
    (no broadcast, no in-place ``+=``); the trace cannot show that the norm reads the sum, so
    ``apply`` checks that in the code before it fuses them."""
    out: dict[int, Node] = {}
    kids = [c for c in parent.children if c.scope is not None or c.name not in METADATA_OPS]
    for first, second in zip(kids, kids[1:]):
        if first.scope is not None or first.name != "aten::add" or second.scope is None:
            continue
        call = second.scope
        if call.kind != "module" or call.info is None or len(call.args) != 1 or not norm_class(call.info):
            continue
        shape = _arg(first, 0)
        if shape and _arg(first, 1) == shape and same_rows(shape, call.args[0].shape):
            out[id(first)] = second
    return out


def pair_linear_activation(parent: Node) -> dict[int, Instance]:
    """A linear module (``nn.Linear``, GPT-2's ``Conv1D``) whose call is directly followed
    (metadata ops aside) by an activation module's call on a tensor of the linear's output
    shape, both children of ``parent`` (an MLP's ``act(fc(x))``): map both scopes (by id) to one
    instance placed at the module that holds them, ``linear_gelu`` for a GELU module (GPT-2's
    ``GPT2MLP``, BERT's ``BertIntermediate``, ViT's ``ViTMLP``), ``linear_relu`` for an
    ``nn.ReLU`` (OPT's decoder layers, T5's ``T5DenseActDense``) or for an ``aten::relu`` op
    run by the forward itself on a linear child's output (``torch.relu``/``F.relu`` written as a
    call; not DETR's prediction heads, whose linears are a ModuleList's), ``linear_relu2`` for a
    squared ReLU: an activation module whose call ran relu then square and nothing else (transformers'
    ``ReLUSquaredActivation``: Nemotron's and Arcee's MLPs), or that ``aten::relu`` op directly
    followed by an ``aten::square`` (or ``aten::pow``) on its output shape (RWKV's feed-forward,
    ``torch.square(torch.relu(self.key(x)))``; the square op is mapped too).  A bias-free linear (T5's
    ``wi``) is the same problem: ``apply`` hands the kernel a zero bias.  Gated MLPs (gate/up/down,
    packed gate_up: flan-T5's ``T5DenseGatedActDense``) are left to their own kinds.  The trace
    cannot show that the activation reads the linear's output: ``apply`` checks that on the
    module before it fuses them."""
    out: dict[int, Instance] = {}
    owner = parent.scope.info if parent.scope is not None else None
    if owner is None or owner.mlp is not None or owner.packed_mlp is not None:
        return out
    kids = [c for c in parent.children if c.scope is not None or c.name not in METADATA_OPS]
    for i, (first, second) in enumerate(zip(kids, kids[1:])):
        lin, act = first.scope, second.scope
        # torch.relu(self.<linear>(x)) in the forward: apply rewrites only a call of its own child
        called = (act is None and second.name == "aten::relu" and lin is not None and lin.info is not None
                  and lin.info.qualname.rpartition(".")[0] == owner.qualname)
        squared_module = act is not None and act.info is not None and _runs_relu_then_square(second)
        if (lin is None or lin.info is None or lin.info.linear is None or not lin.args or not lin.outputs
                or not called and (act is None or act.info is None or not act.args
                                   or (act.info.gelu_tanh is None and not act.info.relu and not squared_module))):
            continue
        K, N, transposed = lin.info.linear
        x, y = lin.args[0], lin.outputs[0]
        act_shape = tuple(_arg(second, 0) or ()) if called else act.args[0].shape
        if not x.shape or x.shape[-1] != K or y.shape != x.shape[:-1] + (N,) or act_shape != y.shape:
            continue
        third = kids[i + 2] if i + 2 < len(kids) else None
        squared_call = (called and third is not None and third.scope is None and third.name in SQUARE_OPS
                        and tuple(_arg(third, 0) or ()) == y.shape and _squares(third))
        if squared_module or squared_call:
            kind, shape, form = "linear_relu2", make_shape("linear_relu2", rows(x.shape), N, K), ""
        elif called or act.info.relu:
            kind, shape, form = "linear_relu", make_shape("linear_relu", rows(x.shape), N, K), ""
        else:
            tanh = int(act.info.gelu_tanh or _runs_op(second, "aten::tanh"))
            kind, shape = "linear_gelu", make_shape("linear_gelu", rows(x.shape), N, K, tanh)
            form = f" ({'tanh' if tanh else 'erf'} form)"
        layout = "Conv1D, weight stored [K, N]" if transposed else \
            "nn.Linear, no bias: apply hands the kernel zeros" if lin.info.bias_free else "nn.Linear"
        act_name = ("torch.square(torch.relu(...)) (calls)" if squared_call else "torch.relu (a call)" if called
                    else act.info.cls_name + (" (relu then square)" if squared_module else ""))
        inst = Instance(kind, x.dtype, [(shape, 1)], module=owner.qualname,
                        notes=(f"{lin.info.qualname.rsplit('.', 1)[-1]} ({layout}) + {act_name}{form} "
                               f"in {owner.cls_name}",))
        out[id(first)] = out[id(second)] = inst
        if squared_call:
            out[id(third)] = inst
    return out


def _squares(node: Node) -> bool:
    """``aten::square``, or ``aten::pow`` with the exponent 2."""
    return node.name == "aten::square" or _concrete(node, 1) in (2, 2.0)


def _runs_relu_then_square(scope: Node) -> bool:
    """Did this module call run exactly a ReLU and then a square of its output (metadata ops
    aside), with no module call under it (transformers' ``ReLUSquaredActivation``)?"""
    ops = [c for c in scope.children if c.scope is not None or c.name not in METADATA_OPS]
    return (len(ops) == 2 and all(c.scope is None for c in ops) and ops[0].name in RELU_OPS
            and ops[1].name in SQUARE_OPS and _squares(ops[1]) and _arg(ops[0], 0) == _arg(ops[1], 0))


ROW_ADD_OPS = ("aten::add", "aten::add_")


def pair_linear_row_add(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """A linear child's call directly followed (metadata ops aside: BART's ``.to(device)``) by
    an add of a row, [N] or [1, N] in the output's dtype, onto the linear's [..., N] output, in
    the forward of ``parent`` (Marian's, Pegasus's and mBART's ``self.lm_head(h) +
    self.final_logits_bias``): map the add (by id) to a ``matmul`` instance placed at the module
    whose forward writes it, with no shape of its own (it adds no GEMM call).  ``apply``
    rewrites that forward so that the GEMM's fresh output takes the row (``aten::add_``, the
    patched model's spelling, pairs the same way); where it cannot, the add's time counts as not
    covered, by that module.  The root module (no name) is left out, and so is a forward that
    runs a GEMM of its own (its time is counted at that module too): their shares could not be
    told from the rest."""
    out: dict[int, Instance] = {}
    owner = parent.scope.info if parent.scope is not None else None
    if owner is None or not owner.qualname:
        return out
    kids = [c for c in parent.children if c.scope is not None or c.name not in METADATA_OPS]
    if any(c.scope is None and c.name in MATMUL_OPS for c in kids):
        return out
    for first, second in zip(kids, kids[1:]):
        lin = first.scope
        if (lin is None or lin.kind != "module" or lin.info is None or lin.info.linear_out is None
                or not lin.outputs or lin.info.qualname.rpartition(".")[0] != owner.qualname
                or second.scope is not None or second.name not in ROW_ADD_OPS):
            continue
        N = lin.info.linear_out
        y = list(lin.outputs[0].shape)
        dtype = _dtype(second, 0, default_dtype)
        if (not y or y[-1] != N or _arg(second, 0) != y or _arg(second, 1) not in ([N], [1, N])
                or _dtype(second, 1, default_dtype) != dtype or _concrete(second, 2) not in (None, 1)):
            continue
        name = lin.info.qualname.rsplit(".", 1)[-1]
        out[id(second)] = Instance("matmul", dtype, [], module=owner.qualname,
                                   notes=(f"{name}(x) + a [1, N] row in {owner.cls_name}: the row added onto the "
                                          "GEMM's output in place",))
    out.update(_linear_scales(kids, owner, default_dtype))
    return out


SCALE_OPS = ("aten::mul", "aten::div", "aten::mul_", "aten::div_")


def _by_number(node: Node) -> bool:
    """A multiply or divide of a tensor by a Python number (a wrapped 0-dim double or long),
    no rounding mode."""
    raw = node.dtypes[1] if len(node.dtypes) > 1 else None
    return (node.scope is None and node.name in SCALE_OPS and _arg(node, 1) in (None, [])
            and raw in ("double", "long") and len(node.shapes) <= 2)


def _linear_scales(kids: list[Node], owner: ModuleInfo, default_dtype: str) -> dict[int, Instance]:
    """A linear child's [..., N] output multiplied or divided by a Python number right after the
    call, in ``owner``'s forward (Granite's ``logits / self.config.logits_scaling``, Cohere's
    ``logits * self.logit_scale``): map the op (by id) to a ``matmul`` instance placed at
    ``owner``, as a row add (``pair_linear_row_add``).  ``apply`` rewrites the forward to scale
    the linear's input instead where K < N (``row_adds``: a [T, K] pass for a [T, N] one), or
    its fresh output in place; a patched model's profile shows the input scaled by a number just
    before the switched linear's call (no ``nn.Linear`` forward of its own), or the in-place op
    after it, and pairs those the same way."""
    out: dict[int, Instance] = {}
    for first, second in zip(kids, kids[1:]):
        lin, op = (first.scope, second) if first.scope is not None else (second.scope, first)
        if (lin is None or op.scope is not None or not _by_number(op) or lin.kind != "module" or lin.info is None
                or lin.info.linear_out is None or not lin.outputs or not lin.args
                or lin.info.qualname.rpartition(".")[0] != owner.qualname):
            continue
        N = lin.info.linear_out
        y, x = list(lin.outputs[0].shape), list(lin.args[0].shape)
        if not y or y[-1] != N:
            continue
        if op is second and _arg(op, 0) != y:
            continue
        if op is first and (lin.info.linear is not None or _arg(op, 0) != x or op.name.endswith("_")):
            continue  # the input scaled before the call: only that of a switched linear
        name = lin.info.qualname.rsplit(".", 1)[-1]
        verb = "divided" if op.name.startswith("aten::div") else "multiplied"
        out[id(op)] = Instance("matmul", _dtype(op, 0, default_dtype), [], module=owner.qualname,
                               notes=(f"{name}(x) {verb} by a number in {owner.cls_name}: the GEMM's input "
                                      "scaled instead, or its output in place",))
    return out


def _runs_op(node: Node, name: str) -> bool:
    return any(c.scope is None and c.name == name or _runs_op(c, name) for c in node.children)


def pair_adds_ahead(root: Node) -> dict[int, tuple[Node, str]]:
    """A residual add that ends one module's forward and whose sum the next module call to run
    normalises (GPT-2's ``hidden_states = residual + feed_forward_hidden_states; return
    hidden_states``, then the next block's ``ln_1`` or the final ``ln_f``): map the add (by id)
    to (that norm scope, the qualname of the module whose forward holds the add).  In execution
    order, only module entries and metadata ops may come between; the norm is called on one
    tensor of the sum's rows (``same_rows``: OPT's layer returns its 2-D sum viewed back to
    3-D), and the addends have one shape (no broadcast).  The norm must be outside the module
    that holds the add: one inside it runs before that forward ends (OPT's decoder adds the
    position embeddings, then runs its first layer), and such an add is no place the applier
    can fuse.  Adds followed by a norm in their own forward are ``pair_residual_adds``'.  As
    there, the trace cannot show that the norm reads the sum: the applier checks it on every
    call."""
    events = list(_execution_order(root))
    out: dict[int, tuple[Node, str]] = {}
    for i, node in enumerate(events):
        if node.scope is not None or node.name != "aten::add":
            continue
        shape = _arg(node, 0)
        if not shape or _arg(node, 1) != shape:
            continue
        for later in events[i + 1:]:
            call = later.scope
            if call is None:
                break  # an op runs first
            if call.kind == "module" and call.info is not None and norm_class(call.info) and len(call.args) == 1:
                producer = _enclosing_module(node.parent, lambda info: True)
                if (same_rows(shape, call.args[0].shape) and later.parent is not node.parent and producer is not None
                        and not _within(call.info.qualname, producer.qualname)):
                    out[id(node)] = (later, producer.qualname)
                break
    return out


def _within(name: str, module: str) -> bool:
    """Is the module named ``name`` inside the one named ``module`` (the root, named "", holds all)?"""
    return not module or name.startswith(module + ".")


def _execution_order(node: Node):
    """Scope entries and ops (an op's own children are part of it) in the order they ran;
    metadata ops that ran nothing else are left out."""
    for child in node.children:
        if child.scope is not None:
            yield child
            yield from _execution_order(child)
        elif not _metadata_only(child):
            yield child


def _metadata_only(node: Node) -> bool:
    return node.name in METADATA_OPS and all(_metadata_only(c) for c in node.children if c.scope is None)


def pair_softcap(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """``x / c``, ``tanh``, ``* c`` in a row among a node's children (views aside), each on a
    tensor of the first one's shape, ``c`` a scalar both times: one ``softcap`` (Gemma-2's final
    logits).  Map the three nodes (by id) to it."""
    out: dict[int, Instance] = {}
    kids = [c for c in parent.children if c.scope is None and c.name not in VIEW_OPS]
    for div, tanh, mul in zip(kids, kids[1:], kids[2:]):
        if (div.name, tanh.name, mul.name) != ("aten::div", "aten::tanh", "aten::mul"):
            continue
        x = _arg(div, 0)
        if not x or _arg(div, 1) or _arg(tanh, 0) != x or _arg(mul, 0) != x or _arg(mul, 1):
            continue
        inst = Instance("softcap", _dtype(div, 0, default_dtype), [(make_shape("softcap", rows(x), x[-1]), 1)],
                        notes=("x / c, tanh, * c: a soft cap",))
        out[id(div)] = out[id(tanh)] = out[id(mul)] = inst
    return out


def norm_class(info: ModuleInfo) -> bool:
    lower = info.cls_name.lower()
    return info.is_layernorm or lower.endswith(("rmsnorm", "layernorm"))


# ------------------------------------------------------------------ scope recognizers
def recognize_scope(node: Node, ops_below: list[Node], subtree_ops: set[str], default_dtype: str,
                    fuse_mlp: bool, residual_add_before: bool = False) -> Instance | Unsupported | None:
    """Does this scope claim the time of an op chain ``ops_below`` running inside it?
    ``residual_add_before``: a norm scope that ``pair_residual_adds`` paired with the add
    before it (it is then an ``add_<norm>``)."""
    from .recognize_scan import (CONV_FUNCTION, SCAN_FUNCTION, causal_conv1d_instance,  # it imports this module
                                 marked, selective_scan_instance)

    call = node.scope
    assert call is not None
    if call.kind == "function":
        if call.name.endswith("eager_attention_forward"):
            return _eager_attention(call, node, subtree_ops, default_dtype)
        if call.name.endswith(".compute_bias"):
            return _relative_position_bias(call, node, default_dtype)
        if marked(call, SCAN_FUNCTION):
            return selective_scan_instance(call, node, default_dtype)
        if marked(call, CONV_FUNCTION):
            return causal_conv1d_instance(call, node, default_dtype)
        return _rotary(call, node, default_dtype)
    info = call.info
    if info is None or not call.args:
        return None
    x = call.args[0]
    lower = info.cls_name.lower()
    norm_kind = None
    if lower.endswith("rmsnorm"):  # RMSNorm, LlamaRMSNorm, ... (not a block that holds one)
        norm_kind = "rmsnorm"
    elif info.is_layernorm or lower.endswith("layernorm"):
        # A class called *LayerNorm without mean subtraction is an RMS norm (T5LayerNorm).
        plain_rms = not ({"aten::layer_norm", "aten::native_layer_norm", "aten::sub", "aten::var", "aten::var_mean"}
                         & subtree_ops) and "aten::rsqrt" in subtree_ops
        norm_kind = "rmsnorm" if plain_rms else "layernorm"
    if norm_kind and x.shape:
        notes = (f"eps={info.eps:g}",) if info.eps is not None else ()
        if len(call.args) >= 2 and call.args[1].shape == x.shape:  # norm(x, residual): add + norm
            norm_kind = f"add_{norm_kind}"
            notes += (f"residual add inside {info.cls_name}",)
        elif residual_add_before:
            norm_kind = f"add_{norm_kind}"
            notes += (f"residual add just before {info.cls_name}",)
        return Instance(norm_kind, x.dtype, [(make_shape(norm_kind, rows(x.shape), x.shape[-1]), 1)],
                        module=info.qualname, notes=notes)
    if (info.residual_norm is not None and len(call.args) >= 2 and call.outputs
            and call.outputs[0].shape == call.args[1].shape and call.args[1].shape):
        if any(op.name in MATMUL_OPS for op in ops_below):
            return None  # its linear is a matmul
        kind, linear, norm = info.residual_norm
        r = call.args[1].shape
        return Instance(kind, call.args[1].dtype, [(make_shape(kind, rows(r), r[-1]), 1)], module=info.qualname,
                        notes=(f"{norm}({linear}(h) + residual) in {info.cls_name}",))
    if info.gptoss_experts is not None and len(call.args) >= 3 and len(x.shape) == 2 and len(call.args[1].shape) == 2:
        E, D, I = info.gptoss_experts
        T, K = call.args[1].shape
        return Instance("moe_experts_gptoss", x.dtype, [(make_shape("moe_experts_gptoss", T, K, E, D, I), 1)],
                        module=info.qualname,
                        notes=(f"{info.cls_name}: {E} clamped, biased GLU experts, {K} a token (routing, gathers, "
                               "expert GEMMs and the weighted sum)",))
    if info.experts_layout is not None:
        return Unsupported(f"{info.cls_name} (experts: {info.experts_layout}; not the moe_experts layout)")
    if (info.moe_experts is not None and len(call.args) >= 3 and len(call.args[1].shape) == 2
            and (len(x.shape) == 2 or (info.experts_blocks and len(x.shape) > 2 and x.shape[-1] == info.moe_experts[1]
                                       and rows(x.shape) == call.args[1].shape[0]))):
        E, D, I = info.moe_experts
        T, K = call.args[1].shape
        return Instance("moe_experts", x.dtype, [(make_shape("moe_experts", T, K, E, D, I), 1)], module=info.qualname,
                        notes=(f"{info.cls_name}: {E} SwiGLU experts, {K} a token (routing, gathers, expert GEMMs "
                               "and the weighted sum)" + ("; weights as [E x I, D] blocks, packed once when switched"
                                                          if info.experts_blocks else ""),))
    if info.patch_conv is not None and len(x.shape) == 4 and call.outputs and len(call.outputs[0].shape) == 4:
        kh, kw = info.patch_conv
        B, C = x.shape[:2]
        _, O, ph, pw = call.outputs[0].shape
        return Instance("matmul", x.dtype, [(make_shape("matmul", B * ph * pw, O, C * kh * kw), 1)], module=info.qualname,
                        notes=(f"patch convolution {info.qualname} (stride = kernel {kh}x{kw}): a GEMM over the "
                               "patches, as apply switches it",))
    if info.window_conv1d is not None and len(x.shape) == 3 and call.outputs and len(call.outputs[0].shape) == 3:
        k, stride, padding = info.window_conv1d
        B, C, _ = x.shape
        _, O, L_out = call.outputs[0].shape
        return Instance("matmul", x.dtype, [(make_shape("matmul", B * L_out, O, C * k), 1)], module=info.qualname,
                        notes=(f"convolution {info.qualname} (kernel {k}, stride {stride}, padding {padding}): a GEMM "
                               "over its unfolded windows, as apply switches it",))
    if (info.rotary_table and len(call.outputs) == 2 and len(call.args) >= 2 and call.outputs[0] == call.outputs[1]
            and len(call.outputs[0].shape) == 3):
        B, S, D = call.outputs[0].shape
        return Instance("rotary_table", call.outputs[0].dtype, [(make_shape("rotary_table", B, S, D), 1)],
                        module=info.qualname, notes=(f"cos/sin tables of {info.cls_name} (default RoPE)",))
    if info.scaled_embedding is not None and call.outputs:
        V, N, scale = info.scaled_embedding
        return Instance("embedding", call.outputs[0].dtype, [(make_shape("embedding", math.prod(x.shape), V, N), 1)],
                        module=info.qualname, notes=(f"{info.cls_name}: rows times {scale:g}",))
    if info.xielu and x.shape and call.outputs and call.outputs[0].shape == x.shape:
        return Instance("xielu", x.dtype, [(make_shape("xielu", rows(x.shape), x.shape[-1]), 1)], module=info.qualname,
                        notes=(f"{info.cls_name} (xIELU: where(x > 0, alpha_p x^2 + beta x, "
                               "(expm1(min(x, eps)) - x) alpha_n + beta x))",))
    if info.gelu_tanh is not None and x.shape:
        tanh = int(info.gelu_tanh or "aten::tanh" in subtree_ops)
        return Instance("gelu", x.dtype, [(make_shape("gelu", rows(x.shape), x.shape[-1], tanh), 1)],
                        module=info.qualname, notes=(f"{info.cls_name} ({'tanh' if tanh else 'erf'} form)",))
    if info.packed_mlp is not None and subtree_ops & SILU_OPS and x.shape:
        if any(op.name in MATMUL_OPS for op in ops_below):
            return None  # its linears are matmuls
        D, H = info.packed_mlp
        return Instance("swiglu_packed", x.dtype, [(make_shape("swiglu_packed", rows(x.shape), H), 1)],
                        module=info.qualname,
                        notes=(f"silu(gate)*up on the packed gate_up projection of {info.cls_name}",))
    if info.packed_mlp is not None and subtree_ops & GELU_OPS and x.shape:
        if any(op.name in MATMUL_OPS for op in ops_below):
            return None  # its linears are matmuls
        D, H = info.packed_mlp
        tanh = int("aten::tanh" in subtree_ops or _gelu_tanh_below(node))
        return Instance("geglu_packed", x.dtype, [(make_shape("geglu_packed", rows(x.shape), H, tanh), 1)],
                        module=info.qualname,
                        notes=(f"gelu(first half)*second half of the packed {D}->{2 * H} projection of {info.cls_name} "
                               f"({'tanh' if tanh else 'erf'} form); its linears are matmuls",))
    if (info.mlp is not None and info.mlp_dims is not None and subtree_ops & GELU_OPS
            and not subtree_ops & SILU_OPS and x.shape):
        if any(op.name in MATMUL_OPS for op in ops_below):
            return None
        D, H = info.mlp_dims
        tanh = int("aten::tanh" in subtree_ops or _gelu_tanh_below(node))
        return Instance("geglu", x.dtype, [(make_shape("geglu", rows(x.shape), H, tanh), 1)], module=info.qualname,
                        notes=(f"gelu(gate)*up inside {info.cls_name}; its linears are matmuls",))
    if "rotary" in lower and len(x.shape) == 4 and any(o.shape == x.shape for o in call.outputs):
        return _rotary(call, node, default_dtype)
    if info.mlp is not None and info.mlp_dims is not None and subtree_ops & SILU_OPS and x.shape:
        D, H = info.mlp_dims
        roles = f"gate={info.mlp['gate']}, up={info.mlp['up']}, down={info.mlp['down']}"
        if fuse_mlp:
            return Instance("fused_mlp", x.dtype, [(make_shape("fused_mlp", rows(x.shape), D, H), 1)],
                            module=info.qualname, notes=(f"SwiGLU MLP {info.cls_name} ({roles})",))
        if any(op.name in MATMUL_OPS for op in ops_below):
            return None  # its linears are matmuls
        return Instance("swiglu", x.dtype, [(make_shape("swiglu", rows(x.shape), H), 1)], module=info.qualname,
                        notes=(f"silu(gate)*up inside {info.cls_name} ({roles}); its linears are matmuls",))
    return None


def _relative_position_bias(call: ScopeCall, node: Node, default_dtype: str) -> Instance | Unsupported | None:
    """A ``compute_bias`` call of a module holding T5's relative position bias table
    (``relative_bias_parts``), returning [1, H, Sq, Sk]: one ``relative_position_bias`` (the
    buckets, the table lookup and the permute), placed at that module."""
    owner = _enclosing_module(node.parent, lambda info: info.relative_bias is not None)
    if owner is None or len(call.outputs) != 1 or len(call.outputs[0].shape) != 4 or call.outputs[0].shape[0] != 1:
        return None
    buckets, max_distance, both = owner.relative_bias
    _, H, Sq, Sk = call.outputs[0].shape
    side = buckets // 2 if both else buckets
    way = "bidirectional" if both else "one-way"
    if side // 2 < 1 or max_distance <= side // 2:
        return Unsupported(f"{call.name} ({buckets} buckets {way}, max_distance {max_distance}: no log buckets)")
    return Instance("relative_position_bias", call.outputs[0].dtype or default_dtype,
                    [(make_shape("relative_position_bias", H, Sq, Sk, buckets, int(both)), 1)], module=owner.qualname,
                    notes=(f"compute_bias of {owner.cls_name}: {buckets} buckets {way}, max_distance {max_distance}",))


def _gelu_tanh_below(node: Node) -> bool:
    """Does a GELU module, or an ``aten::gelu`` with approximate="tanh", run under ``node``?"""
    for child in node.children:
        if child.scope is not None and child.scope.info is not None and child.scope.info.gelu_tanh:
            return True
        if child.name == "ak::gelu::tanh" or (child.name.startswith("aten::gelu") and _concrete(child, 1) == "tanh"):
            return True
        if _gelu_tanh_below(child):
            return True
    return False


def _rotary(call: ScopeCall, node: Node, default_dtype: str) -> Instance | Unsupported | None:
    tensors = [a for a in call.args[:2] if len(a.shape) == 4]
    if not tensors:
        return None
    where = call.name if call.kind == "function" else (call.info.cls_name if call.info else call.name)
    if {"view_as_complex", "view_as_real"} & set(call.code_names):
        return Unsupported(f"rotary {where} (complex layout)")
    heads = _enclosing_module(node.parent, lambda info: info.heads is not None)
    shapes = []
    for t in tensors:
        B, d1, d2, D = t.shape
        if heads is not None and d1 != heads.heads and d2 == heads.heads:
            d1, d2 = d2, d1  # stored [B,S,H,D]
        shapes.append((make_shape("rotary", B, d1, d2, D), 1))
    below = _op_names_below(node)
    if "aten::stack" not in below and "rotate_half" not in call.code_names and _reads_pairs(node):
        # DeepSeek's apply_rotary_pos_emb_interleave: x[..., 0::2] and x[..., 1::2] rotated and
        # joined as halves, cat(x1 cos - x2 sin, x2 cos + x1 sin): interleaved pairs in, the
        # rotate_half layout out (apply probes the function against the kind's reference)
        kind, layout = "rotary_pairs_to_halves", "interleaved pairs in, rotate_half halves out"
    elif "aten::stack" in below:  # pairs stacked, not halves joined (Cohere's; a cat beside it joins a
        # partial rotary's rotated dims and the rest: GLM's)
        kind, layout = "rotary_interleaved", "interleaved pairs"
    else:
        kind = "rotary"
        layout = ("rotate_half layout" if "rotate_half" in call.code_names or call.kind == "module"
                  else "layout assumed rotate_half")
        # cos and sin narrower than the heads: the function rotates the first dims and passes the
        # rest through (GPT-NeoX's and Nemotron's apply_rotary_pos_emb): the op gets those dims
        tables = [a.shape[-1] for a in call.args[len(tensors):len(tensors) + 2] if a.shape]
        if tables and max(tables) < tensors[0].shape[-1]:
            R = max(tables)
            shapes = [(make_shape("rotary", *(list(shape.values())[:3] + [R])), n) for shape, n in shapes]
            layout += f"; partial: the first {R} of {tensors[0].shape[-1]} dims"
    module = _enclosing_module(node.parent, lambda info: True)
    return Instance(kind, tensors[0].dtype or default_dtype, shapes,
                    module=module.qualname if module else "", notes=(f"{where} ({layout})",))


def _reads_pairs(node: Node) -> bool:
    """Does a strided slice of step 2 (``x[..., 0::2]``, ``x[..., 1::2]``) run under ``node``?"""
    return any((child.name == "aten::slice" and _concrete(child, 4) == 2) or _reads_pairs(child)
               for child in node.children)


def _op_names_below(node: Node) -> set[str]:
    """The ops called under ``node``'s scope and the scopes in it, not those an op calls (aten::stack
    runs aten::cat)."""
    names: set[str] = set()
    for child in node.children:
        if child.scope is None:
            names.add(child.name)
        else:
            names |= _op_names_below(child)
    return names


# what transformers' plain eager attention runs (repeat_kv, q @ k^T * scaling, + mask, softmax
# in fp32 and back, dropout, @ v, the transpose back), views and copies aside
PLAIN_EAGER_ATTENTION_OPS = METADATA_OPS | {
    "aten::matmul", "aten::bmm", "aten::mul", "aten::add", "aten::softmax", "aten::_softmax", "aten::_to_copy",
    "aten::copy_", "aten::clone", "aten::_unsafe_view"}


# what GPT-OSS's eager attention adds to the plain form: the sinks joined to the scores (cat) and
# the row max taken out before the softmax
SINK_ATTENTION_OPS = PLAIN_EAGER_ATTENTION_OPS | {"aten::cat", "aten::max", "aten::sub"}


def _eager_attention(call: ScopeCall, node: Node, subtree_ops: set[str],
                     default_dtype: str) -> Instance | Unsupported | None:
    """transformers' eager attention ``(module, q, k, v, attention_mask, ...)`` with a mask: one
    ``attention_softcap`` where it soft-caps its scores (a tanh ran inside: Gemma-2's ``softcap``),
    one ``attention_sinks`` where it joins a tensor of one value per head to the scores
    (GPT-OSS's sinks, passed as ``s_aux``), one ``attention_masked`` where it ran nothing but the
    plain computation (``PLAIN_EAGER_ATTENTION_OPS``: a model configured for eager attention,
    Gemma-2 with its cap switched off); anything else is left to the op recognizers, as is a call
    without a mask.  ``apply`` probes the function before it switches the plain and sink forms."""
    capped = "aten::tanh" in subtree_ops
    q, k, v = (call.args[i].shape if len(call.args) > i else () for i in range(3))
    sinks = (not capped and "aten::cat" in subtree_ops and subtree_ops <= SINK_ATTENTION_OPS and len(q) == 4
             and len(call.args) > 4 and call.args[4].shape == (q[1],))
    if not capped and not sinks and not subtree_ops <= PLAIN_EAGER_ATTENTION_OPS:
        return None
    kind = "attention_softcap" if capped else "attention_sinks" if sinks else "attention_masked"
    what = {"attention_softcap": "soft-capped scores", "attention_sinks": "a sink per head",
            "attention_masked": "plain attention"}[kind]
    if len(q) != 4 or len(k) != 4 or v != k or q[2] != k[2] or q[3] != k[3] or q[1] % k[1]:
        return Unsupported(f"{call.name} ({what}, q {q}, k {k}, v {v})") if kind != "attention_masked" else None
    B, H, S, D = q
    mask = call.args[3] if len(call.args) > 3 else None
    form = mask_form(list(mask.shape), mask.dtype or default_dtype, call.args[0].dtype or default_dtype,
                     B, H, S) if mask is not None else None
    if form is None:
        return (Unsupported(f"{call.name} ({what}, without a mask {kind} takes)") if kind != "attention_masked"
                else None)
    module = _enclosing_module(node.parent, lambda info: True)
    return Instance(kind, call.args[0].dtype or default_dtype, [(make_shape(kind, B, H, k[1], S, D, *form), 1)],
                    module=module.qualname if module else "",
                    notes=(f"{what} in {call.name.rsplit('.', 1)[-1]} of {module.cls_name if module else 'the model'}, "
                           f"attention_mask {'x'.join(map(str, mask.shape))} ({'additive' if form[0] else 'bool'})",))


def is_gemm_kernel(name: str) -> bool:
    low = name.lower()
    return any(marker in low for marker in GEMM_KERNEL_MARKERS)
