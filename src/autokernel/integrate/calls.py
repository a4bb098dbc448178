"""Attention and rotary: rebind the functions (SDPA, transformers' eager attention,
``apply_rotary*``) a module's methods call."""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..head_copies import drop_head_copies
from ..recognize import gelu_form, module_wrapped_function
from .class_cache import class_members, kept_class
from .functionals import keep_transposed, linear_replacement, softmax_replacement
from .ops import rows, traced_as_original
from .patching import _code_names, _pick, rewrap
from .rewrite import compile_forward, parse_forward, rebound_globals
from .rotary_tables import PARTIAL, rotary_arity, table_convention, table_replacement
from .selection import KernelOp


# ------------------------------------------------------------------ functions called in forward
def kernel_mask(mask: Any, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
    """SDPA's ``attn_mask`` as the ``attention_masked`` problem takes it: 4-D ``[B|1, H|1, S|1,
    S]``, bool, in the query's dtype or fp32, expanded (stride-0) dimensions cut back to size 1
    (no [B,H,S,S] copy of a [B,1,1,S] mask), contiguous.  None when the op cannot take it."""
    if not isinstance(mask, torch.Tensor) or not 2 <= mask.dim() <= 4 or mask.requires_grad:
        return None
    if mask.dtype not in (torch.bool, query.dtype, torch.float32):
        return None
    m = mask[(None,) * (4 - mask.dim())]  # leading size-1 dimensions, a view
    if m.shape[-1] != key.shape[-2] or m.device != query.device:
        return None
    for dim, full in enumerate((query.shape[0], query.shape[1], query.shape[2])):
        size = m.shape[dim]
        if size != 1 and size != full:
            return None
        if size > 1 and m.stride(dim) == 0:
            m = m.narrow(dim, 0, 1)
    return m if m.is_contiguous() else m.contiguous()


def _sdpa_ok(query, key, value, dtype, head_dims, enable_gqa, cross: bool = False) -> bool:
    """Is an SDPA call one the op was judged on: 4-D q, k, v in its dtype and head dims
    (``head_dims``: the (q/k, v) pairs, ``KernelOp.head_dims``; none given: v's as q's), kv
    heads that divide the query heads, and query and key lengths equal (``cross``: different,
    ``attention_cross``)?  One kv head is grouped-query attention with or without ``enable_gqa``:
    SDPA broadcasts it over the query heads (Falcon's multi-query attention, transformers 5.17)."""
    return (query.dim() == 4 and key.dim() == 4
            and value.dim() == 4 and query.dtype == dtype and key.dtype == dtype
            and value.dtype == dtype and key.shape[-1] == query.shape[-1]
            and ((query.shape[-1], value.shape[-1]) in head_dims if head_dims
                 else value.shape[-1] == query.shape[-1])
            and (key.shape[-2] != query.shape[-2]) == cross and value.shape[-2] == key.shape[-2]
            and key.shape[1] == value.shape[1] and query.shape[0] == key.shape[0]
            and (key.shape[1] == query.shape[1] or key.shape[1] == 1
                 or (enable_gqa and query.shape[1] % key.shape[1] == 0)))


def _sdpa_replacement(k: KernelOp | None, masked: KernelOp | None = None,
                      cross: KernelOp | None = None) -> Callable[..., Any]:
    """``F.scaled_dot_product_attention`` whose calls without a mask go to ``k``'s op
    (``attention``), whose calls with one go to ``masked``'s (``attention_masked``), and whose
    calls without ``is_causal`` where the query and key lengths differ (an encoder-decoder's
    cross-attention), with a mask or not, go to ``cross``'s (``attention_cross``), each when the
    call is one its kernel was judged on; the rest to PyTorch."""
    original = F.scaled_dot_product_attention
    plain = (k.op, k.dtype, k.head_dims()) if k is not None else None
    with_mask = (masked.op, masked.dtype, masked.head_dims()) if masked is not None else None
    crossing = (cross.op, cross.dtype, cross.head_dims()) if cross is not None else None

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                     is_causal=False, scale=None, enable_gqa=False):
        if dropout_p == 0.0:
            if (crossing is not None and not is_causal and query.dim() == 4 and key.dim() == 4
                    and query.shape[-2] != key.shape[-2]):
                op, dtype, head_dims = crossing
                if _sdpa_ok(query, key, value, dtype, head_dims, enable_gqa, cross=True):
                    mask = kernel_mask(attn_mask, query, key) if attn_mask is not None else None
                    if attn_mask is None or mask is not None:
                        return op(query, key, value, mask, scale)
            elif attn_mask is None and plain is not None:
                op, dtype, head_dims = plain
                if _sdpa_ok(query, key, value, dtype, head_dims, enable_gqa):
                    return op(query, key, value, bool(is_causal), scale)
            elif attn_mask is not None and with_mask is not None and not is_causal:
                op, dtype, head_dims = with_mask
                if _sdpa_ok(query, key, value, dtype, head_dims, enable_gqa):
                    mask = kernel_mask(attn_mask, query, key)
                    if mask is not None:
                        return op(query, key, value, mask, scale)
        extra = {"enable_gqa": True} if enable_gqa else {}
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, **extra)

    return scaled_dot_product_attention


def hf_plain_attention(dropout: Any, position_bias: Any, kwargs: dict, ignored: frozenset[str] = frozenset()) -> bool:
    """Is a call of transformers' attention interface plain attention (no dropout, position
    bias, softcap, sliding window or attention sinks), which our attention ops compute?  The
    keywords in ``ignored`` are ones the called function leaves unused (``sdpa_ignores``)."""
    return (not dropout and position_bias is None and kwargs.get("s_aux") is None
            and ("softcap" in ignored or kwargs.get("softcap") is None)
            and ("sliding_window" in ignored or kwargs.get("sliding_window") is None))


_SDPA_IGNORES: dict[Any, frozenset[str]] = {}


def sdpa_ignores(fn: Callable[..., Any]) -> frozenset[str]:
    """Which of ``sliding_window`` and ``softcap`` transformers' SDPA attention function ``fn``
    leaves unused, by a probe on small CPU tensors: a keyword whose call gives the same output as
    the call without it.  transformers' SDPA path takes the sliding window from the mask alone
    (Mistral's and Qwen2's layers pass ``sliding_window`` on every call), and some versions drop
    a soft cap (Gemma-2's ``softcap``) where later ones refuse it; a call the function would
    compute differently, or refuse, stays with it."""
    key = module_wrapped_function(fn)
    if key in _SDPA_IGNORES:
        return _SDPA_IGNORES[key]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=gen) for _ in range(3))
    module = types.SimpleNamespace(is_causal=True)
    ignored = set()
    try:
        with torch.no_grad():
            base = fn(module, q, k, v, None, dropout=0.0, scaling=None)[0]
            for name, value in (("sliding_window", 2), ("softcap", 0.5)):
                try:
                    if torch.equal(fn(module, q, k, v, None, dropout=0.0, scaling=None, **{name: value})[0], base):
                        ignored.add(name)
                except Exception:  # noqa: BLE001 - a refusal: such calls stay with the function
                    pass
    except Exception:  # noqa: BLE001 - not callable this way: nothing is taken as ignored
        pass
    _SDPA_IGNORES[key] = frozenset(ignored)
    return _SDPA_IGNORES[key]


def position_bias_mask(bias: torch.Tensor, mask: torch.Tensor | None, causal: bool, dtype: torch.dtype) -> torch.Tensor:
    """T5's position bias as one additive mask: the bias where a key is visible, the lowest value
    of ``dtype`` (and of the bias's) where the padding mask (bool: False; float: added) or
    causality hides it.  What transformers' SDPA path hands SDPA for such a call."""
    lowest = max(torch.finfo(dtype).min, torch.finfo(bias.dtype).min)
    if mask is not None:
        return torch.where(mask, bias, lowest) if mask.dtype == torch.bool else bias + mask
    if causal:
        queries, keys = bias.shape[-2], bias.shape[-1]
        visible = torch.ones(queries, keys, dtype=torch.bool, device=bias.device).tril(keys - queries)
        return torch.where(visible, bias, lowest)
    return bias


def hf_causal(module: Any, is_causal: Any, query: torch.Tensor) -> bool:
    """The causal flag transformers' SDPA path uses for ``query`` (the module's when not given;
    never for a single query)."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    return bool(query.shape[2] > 1 and causal)


def _hf_attention_interfaces(interfaces: Any, sdpa: Callable[..., Any], masks: bool = False,
                             cross: bool = False) -> Any:
    """Hugging Face attention modules pick their attention function from transformers'
    ``ALL_ATTENTION_FUNCTIONS`` by ``config._attn_implementation``: a copy of that mapping whose
    ``"sdpa"`` entry reaches ``sdpa`` (our ops, or PyTorch's for what they do not cover) when
    there is no dropout and no softcap, and no mask or position bias unless ``masks`` (an
    ``attention_masked`` op is applied: the mask, with T5's position bias folded in, goes to it
    with the kv heads unrepeated), and transformers' own ``sdpa_attention_forward`` otherwise.
    With ``cross`` (an ``attention_cross`` op is applied), a call whose query and key lengths
    differ and which transformers runs without causality (cross-attention, or one query against
    a cache) reaches ``sdpa`` too, with its mask and position bias."""
    original = interfaces.get("sdpa")
    if original is None:
        return None
    ignored = sdpa_ignores(original)

    def autokernel_sdpa_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                                is_causal=None, position_bias=None, **kwargs):
        four_d = query.dim() == 4 and key.dim() == 4
        same = four_d and key.shape[2] == query.shape[2]
        crossing = (cross and four_d and key.shape[2] != query.shape[2]
                    and not hf_causal(module, is_causal, query))
        if ((masks and same or crossing) and isinstance(position_bias, torch.Tensor)
                and hf_plain_attention(dropout, None, kwargs, ignored)
                and (attention_mask is None or isinstance(attention_mask, torch.Tensor))):
            causal = hf_causal(module, is_causal, query) and attention_mask is None
            out = sdpa(query, key, value, attn_mask=position_bias_mask(position_bias, attention_mask, causal, key.dtype),
                       is_causal=False, scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
            return out.transpose(1, 2).contiguous(), None
        mask_ok = attention_mask is None or (masks or crossing) and isinstance(attention_mask, torch.Tensor)
        if mask_ok and hf_plain_attention(dropout, position_bias, kwargs, ignored) and (same or crossing):
            causal = hf_causal(module, is_causal, query) and attention_mask is None
            out = sdpa(query, key, value, attn_mask=attention_mask, is_causal=causal, scale=scaling,
                       enable_gqa=key.shape[1] != query.shape[1])
            return out.transpose(1, 2).contiguous(), None
        return original(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                        is_causal=is_causal, position_bias=position_bias, **kwargs)

    class AttentionFunctions(dict):
        def get_interface(self, name, default):
            if name is None or name == "eager":
                return default
            return interfaces.get_interface(name, default) if name != "sdpa" else self["sdpa"]

    return AttentionFunctions({**dict(interfaces), "sdpa": autokernel_sdpa_forward})


def _eager_replacement(capped: KernelOp | None, masked: KernelOp | None, original: Callable[..., Any],
                       sinks: KernelOp | None = None) -> Callable[..., Any]:
    """transformers' eager attention (``eager_attention_forward``) whose calls with a mask the ops
    take go to them: soft-capped ones to ``capped``'s op (``attention_softcap``), plain ones to
    ``masked``'s (``attention_masked``; given only where the function passed ``plain_eager_attention``'s
    probe), those of a module with sinks (``s_aux``: the module's ``sinks``) to ``sinks``'s
    (``attention_sinks``; given only where the function passed ``sink_eager_attention``'s probe);
    the rest to ``original``.  The mask carries the causal and sliding-window pattern, so
    ``sliding_window`` needs nothing.  A negative cap caps as its magnitude does (c tanh(s / c) is
    even in c); a zero one stays with ``original``."""
    def eager_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                                softcap=None, **kwargs):
        module_sinks = getattr(module, "sinks", None) if sinks is not None else None
        if module_sinks is not None:
            k, extra = sinks, (module_sinks,)
            plain = (softcap is None and kwargs.get("s_aux", module_sinks) is module_sinks
                     and isinstance(module_sinks, torch.Tensor) and module_sinks.dtype == sinks.dtype
                     and module_sinks.shape == (query.shape[1],) and module_sinks.device == query.device
                     and not set(kwargs) & (_NOT_PLAIN_KWARGS - {"s_aux"}))
        else:
            k = capped if softcap is not None else masked
            extra = () if softcap is None else (abs(float(softcap)),) if isinstance(softcap, (int, float)) else ()
            plain = (softcap is None or isinstance(softcap, (int, float)) and softcap) and not set(kwargs) & _NOT_PLAIN_KWARGS
        if (k is not None and plain and not dropout and not traced_as_original(k.op)
                and _sdpa_ok(query, key, value, k.dtype, k.head_dims(), True)):
            mask = kernel_mask(attention_mask, query, key)
            if mask is not None:
                out = k.op(query, key, value, mask, scaling, *extra)
                return out.transpose(1, 2).contiguous(), None
        return original(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                        softcap=softcap, **kwargs)

    return eager_attention_forward


# keyword arguments of an attention interface call that change what it computes (attention sinks,
# T5's position bias): such calls stay with the model's own function
_NOT_PLAIN_KWARGS = frozenset({"s_aux", "sinks", "position_bias"})


def _eager_form(fn: Any) -> bool:
    """Is ``fn`` transformers' eager attention function (by name; ``plain_eager_attention`` probes it)?"""
    fn = module_wrapped_function(fn)
    return isinstance(fn, types.FunctionType) and fn.__name__ == "eager_attention_forward"


_EAGER_PROBED: dict[tuple, bool] = {}


def plain_eager_attention(m: nn.Module) -> bool:
    """Does the eager attention function ``m``'s methods call compute ``attention_masked``'s
    reference with ``m`` (its kv groups, head_dim) on a probe?  GPT-OSS's adds its attention sinks
    (``m.sinks``): not plain (``sink_eager_attention``)."""
    fn = _one_eager_function(m)
    return fn is not None and _probe_eager(m, fn)


def sink_eager_attention(m: nn.Module) -> bool:
    """Does the eager attention function ``m``'s methods call compute ``attention_sinks``'s
    reference with ``m``'s ``sinks`` (one per head) on a probe?"""
    fn = _one_eager_function(m)
    sinks = getattr(m, "sinks", None)
    return (fn is not None and isinstance(sinks, torch.Tensor) and sinks.dim() == 1 and sinks.is_floating_point()
            and _probe_eager(m, fn, sinks))


def _one_eager_function(m: nn.Module) -> Any:
    fns = {id(f): f for f in _eager_functions(type(m))}
    return next(iter(fns.values())) if len(fns) == 1 else None


def _eager_functions(cls: type) -> list[Any]:
    found = []
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            break
        for fn in vars(klass).values():
            inner = inspect.unwrap(fn) if isinstance(fn, types.FunctionType) else None
            if isinstance(inner, types.FunctionType):
                value = inner.__globals__.get("eager_attention_forward")
                if value is not None and _eager_form(value) and "eager_attention_forward" in _code_names(inner.__code__):
                    found.append(module_wrapped_function(value))
    return found


def _probe_eager(m: nn.Module, fn: Any, sinks: torch.Tensor | None = None) -> bool:
    from ..problems import get_problem
    from .fused import _probe_call

    param = next(iter(m.parameters()), None)
    dtype = param.dtype if param is not None else torch.float32
    device = param.device if param is not None else torch.device("cpu")
    groups, head_dim = int(getattr(m, "num_key_value_groups", 1) or 1), int(getattr(m, "head_dim", 16) or 16)
    gen = torch.Generator().manual_seed(1234)
    heads = 2 * groups if sinks is None else sinks.shape[0]
    if heads % groups:
        return False
    q = torch.randn(1, heads, 5, head_dim, generator=gen)
    k, v = (torch.randn(1, heads // groups, 5, head_dim, generator=gen) for _ in range(2))
    mask = torch.randn(1, 1, 5, 5, generator=gen).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -1e9)
    args = [t.to(device=device, dtype=dtype) for t in (q, k, v, mask)]
    if sinks is None:
        return _probe_call(_EAGER_PROBED, (type(m), fn), lambda: fn(m, *args, dropout=0.0, scaling=0.3)[0],
                           lambda: get_problem("attention_masked").reference(*args, 0.3).transpose(1, 2), dtype)
    # the module's own sinks (the function reads them from it), as it passes them; one probe a class
    return _probe_call(_EAGER_PROBED, (type(m), fn, "sinks"),
                       lambda: fn(m, *args, dropout=0.0, scaling=0.3, s_aux=sinks)[0],
                       lambda: get_problem("attention_sinks").reference(*args, 0.3, sinks).transpose(1, 2), dtype)


def _gelu_replacement(k: KernelOp) -> Callable[..., Any]:
    """``F.gelu`` through the op; ``module`` (a GELU module called as a function) runs itself
    on the calls the op does not take."""
    op, dtype = k.op, k.dtype
    original = F.gelu

    def gelu(input, approximate="none", module=None):
        if (isinstance(input, torch.Tensor) and input.dtype == dtype and input.dim() >= 1 and input.numel() > 0
                and approximate in ("none", "tanh")):
            return op(rows(op, input, input.shape[-1]), approximate == "tanh").reshape(input.shape)
        return module(input) if module is not None else original(input, approximate=approximate)

    return gelu


_GELU_MODULES_PROBED: dict[int, tuple[nn.Module, bool | None]] = {}


def _gelu_module_form(module: nn.Module) -> bool | None:
    """The GELU form (True: tanh) of a GELU module object, confirmed by running it on a probe
    against the problem's reference (a name may say GELU for another function: QuickGELU)."""
    form = gelu_form(module)
    if form is None:
        return None
    if id(module) not in _GELU_MODULES_PROBED:
        from ..problems import get_problem

        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1234))
        try:
            with torch.no_grad():
                ok = torch.allclose(module(x), get_problem("gelu").reference(x, form), atol=1e-5)
        except Exception:  # noqa: BLE001 - one that cannot take the probe is left alone
            ok = False
        _GELU_MODULES_PROBED[id(module)] = (module, form if ok else None)
    return _GELU_MODULES_PROBED[id(module)][1]


def _rotary_ok(x, cos, sin, dtype) -> bool:
    return (x.dim() == 4 and x.dtype == dtype and cos.dtype == dtype and sin.dtype == dtype
            and cos.dim() >= 2 and tuple(cos.shape) == tuple(sin.shape)
            and all(s == 1 for s in cos.shape[:-2])
            and cos.shape[-2] == x.shape[-2] and cos.shape[-1] == x.shape[-1])


def defaults_only(fn: Callable[..., Any], taken: int) -> Callable[[tuple, dict], bool]:
    """For a function whose first ``taken`` arguments the op replaces: are the rest of a call's
    arguments the ones it runs with by default (ModernBERT passes ``unsqueeze_dim=1``, the default
    the rotary was probed with)?  Arguments without a default, or a signature that cannot be read,
    never are."""
    try:
        params = list(inspect.signature(module_wrapped_function(fn)).parameters.values())[taken:]
    except (TypeError, ValueError):
        params = None
    named = {p.name: p for p in params or ()}

    def same_as_default(value: Any, default: Any) -> bool:
        return value is default or (type(value) is type(default) and isinstance(value, (int, float, str, bool))
                                    and value == default)

    def check(args: tuple, kwargs: dict) -> bool:
        if not args and not kwargs:
            return True
        if params is None or len(args) > len(params):
            return False
        given = list(zip(params, args)) + [(named.get(name), value) for name, value in kwargs.items()]
        return all(p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty
                   and same_as_default(value, p.default) for p, value in given)
    return check


def _rotary_replacement(k: KernelOp, original: Callable[..., Any], pair: bool) -> Callable[..., Any]:
    op, dtype = k.op, k.dtype
    as_probed = defaults_only(original, 4 if pair else 3)

    def as_2d(t):
        return t.reshape(t.shape[-2], t.shape[-1])

    if pair:
        def rotary_pair(q, k_, cos, sin, *args, **kwargs):
            if (as_probed(args, kwargs) and not traced_as_original(op) and _rotary_ok(q, cos, sin, dtype)
                    and _rotary_ok(k_, cos, sin, dtype)):
                c, s = as_2d(cos), as_2d(sin)
                return op(q, c, s), op(k_, c, s)
            return original(q, k_, cos, sin, *args, **kwargs)
        return rotary_pair

    def rotary_one(x, cos, sin, *args, **kwargs):
        if as_probed(args, kwargs) and not traced_as_original(op) and _rotary_ok(x, cos, sin, dtype):
            return op(x, as_2d(cos), as_2d(sin))
        return original(x, cos, sin, *args, **kwargs)
    return rotary_one


def _rotary_form(fn: Any) -> bool | None:
    """True for ``f(q, k, cos, sin)``, False for ``f(x, cos, sin)``, None when ``fn`` is not a
    ``rotate_half``-layout rotary function (or a module made of one).  A function that names
    ``rotate_half`` may rotate another layout (Cohere's rotates interleaved pairs under that
    name): it is run once on a probe and must match the problem's reference."""
    return _rotary_layout_form(fn, "rotary")


def _rotary_pairs_form(fn: Any) -> bool | None:
    """``_rotary_form`` for a function that rotates interleaved pairs (``rotary_interleaved``:
    Cohere's ``apply_rotary_pos_emb``, whose ``rotate_half`` stacks ``-x[..., 1::2]`` and
    ``x[..., ::2]``)."""
    return _rotary_layout_form(fn, "rotary_interleaved")


def _rotary_pairs_to_halves_form(fn: Any) -> bool | None:
    """``_rotary_form`` for a function that reads interleaved pairs and joins the rotated halves
    with ``cat`` (``rotary_pairs_to_halves``: DeepSeek-V3's ``apply_rotary_pos_emb_interleave``)."""
    return _rotary_layout_form(fn, "rotary_pairs_to_halves", lambda name: name == "cat")


def _rotary_layout_form(fn: Any, kind: str,
                        rotates: Callable[[str], bool] = lambda name: "rotate_half" in name) -> bool | None:
    pair = rotary_arity(fn, rotates)
    if pair is None:
        return None
    fn = module_wrapped_function(fn)
    if (fn, kind) not in _ROTARY_PROBED:
        _ROTARY_PROBED[(fn, kind)] = _rotates_as(fn, pair, kind)
    return pair if _ROTARY_PROBED[(fn, kind)] else None


_ROTARY_PROBED: dict[tuple[types.FunctionType, str], bool] = {}


def _rotates_as(fn: types.FunctionType, pair: bool, kind: str) -> bool:
    """Does ``fn`` compute the ``kind`` problem's reference (``x * cos + rotate_half(x) * sin``,
    or with ``rotate_pairs``, or pairs in and halves out) on a probe, with cos/sin given as
    transformers passes them ([B, S, D])?"""
    from ..problems import get_problem

    reference = get_problem(kind).reference
    gen = torch.Generator().manual_seed(1234)
    q, k = torch.randn(1, 2, 5, 8, generator=gen), torch.randn(1, 2, 5, 8, generator=gen)
    cos, sin = torch.randn(1, 5, 8, generator=gen), torch.randn(1, 5, 8, generator=gen)
    try:
        with torch.no_grad():
            got = fn(q, k, cos, sin) if pair else (fn(q, cos, sin),)
    except Exception:  # noqa: BLE001 - a function that cannot take the probe is not switched
        return False
    want = [reference(t, cos[0], sin[0]) for t in ((q, k) if pair else (q,))]
    return (isinstance(got, (tuple, list)) and len(got) == len(want)
            and all(isinstance(g, torch.Tensor) and g.shape == w.shape and torch.allclose(g.float(), w, atol=1e-5)
                    for g, w in zip(got, want)))


def _global_replacements(fn: types.FunctionType, sdpa: Callable | None, rotary: KernelOp | None,
                         gelu: Callable | None = None, sdpa_kinds: tuple[str, ...] = ("attention",),
                         softcap: KernelOp | None = None, eager_masked: KernelOp | None = None,
                         eager_sinks: KernelOp | None = None, rotary_pairs: KernelOp | None = None,
                         pairs_to_halves: KernelOp | None = None,
                         softmax: tuple[Callable, Callable] | None = None,
                         linear: Callable | None = None) -> tuple[dict[str, Any], set[str]]:
    """Names in ``fn``'s globals to rebind so that its calls reach the ops, and the kinds
    (``sdpa_kinds``: those whose ops ``sdpa`` reaches; ``softmax``: the replacements of
    ``F.softmax`` and ``torch.softmax``, ``linear``: of ``F.linear``, from ``functionals``)."""
    out: dict[str, Any] = {}
    kinds: set[str] = set()
    g = fn.__globals__
    names = _code_names(fn.__code__)
    functional = {}
    if sdpa is not None and "scaled_dot_product_attention" in names:
        functional["scaled_dot_product_attention"] = (sdpa, sdpa_kinds)
    if gelu is not None and "gelu" in names:
        functional["gelu"] = (gelu, ("gelu",))
    if softmax is not None and "softmax" in names:
        functional["softmax"] = (softmax[0], ("softmax",))
    if linear is not None and "linear" in names:
        functional["linear"] = (linear, ("matmul",))
    # ``torch.softmax(...)``, the alias
    on_torch = {"softmax": softmax[1]} if softmax is not None and "softmax" in names else {}
    for name in names:
        value = g.get(name)
        if value is F and functional:
            out[name] = _functional_proxy({attr: fn_ for attr, (fn_, _) in functional.items()})
            for _, fn_kinds in functional.values():
                kinds |= set(fn_kinds)
        elif (value is torch or value is torch.nn) and (functional and "functional" in names or value is torch and on_torch):
            # ``torch.nn.functional.scaled_dot_product_attention(...)`` written out (Falcon as
            # transformers 5.17 wrote it, SAM's vision attention, Data2Vec-vision's; the MoE
            # routers' ``torch.nn.functional.softmax``), or ``torch.softmax``
            swapped = dict(on_torch) if value is torch else {}
            if functional and "functional" in names:
                inner = _functional_proxy({attr: fn_ for attr, (fn_, _) in functional.items()})
                nn_proxy = _namespace_proxy(torch.nn, {"functional": inner})
                if value is torch.nn:
                    out[name] = nn_proxy
                    for _, fn_kinds in functional.values():
                        kinds |= set(fn_kinds)
                    continue
                swapped["nn"] = nn_proxy
                for _, fn_kinds in functional.values():
                    kinds |= set(fn_kinds)
            out[name] = _namespace_proxy(torch, swapped)
            if "softmax" in swapped:
                kinds.add("softmax")
        elif sdpa is not None and value is F.scaled_dot_product_attention:
            out[name] = sdpa
            kinds |= set(sdpa_kinds)
        elif sdpa is not None and name == "ALL_ATTENTION_FUNCTIONS" and hasattr(value, "get_interface"):
            interfaces = _hf_attention_interfaces(value, sdpa, masks="attention_masked" in sdpa_kinds,
                                                  cross="attention_cross" in sdpa_kinds)
            if interfaces is not None:
                out[name] = interfaces
                kinds |= set(sdpa_kinds)
        elif gelu is not None and value is F.gelu:
            out[name] = gelu
            kinds.add("gelu")
        elif gelu is not None and isinstance(value, nn.Module) and _gelu_module_form(value) is not None:
            # a GELU module held in the globals and called as a function (RoBERTa's LM head:
            # ``gelu = get_activation("gelu")``)
            tanh = _gelu_module_form(value)
            out[name] = lambda input, _module=value, _tanh=tanh: gelu(input, "tanh" if _tanh else "none", _module)
            kinds.add("gelu")
        elif (softcap is not None or eager_masked is not None or eager_sinks is not None) and _eager_form(value):
            out[name] = _eager_replacement(softcap, eager_masked, value, eager_sinks)
            kinds |= {kind for kind, k in (("attention_softcap", softcap), ("attention_masked", eager_masked),
                                           ("attention_sinks", eager_sinks)) if k}
        for rot, form_of in ((rotary, _rotary_form), (rotary_pairs, _rotary_pairs_form),
                             (pairs_to_halves, _rotary_pairs_to_halves_form)):
            form = form_of(value) if rot is not None else None
            if form is not None:
                # one that rotates the tables' width of each head and passes the rest through
                # (GPT-NeoX's, Nemotron's) gets its calls with narrower tables to the op too
                partial = table_convention(value, rot.kind) == PARTIAL
                out[name] = table_replacement(rot, value, PARTIAL) if partial else _rotary_replacement(rot, value, form)
                kinds.add(rot.kind)
                break
            convention = table_convention(value, rot.kind) if rot is not None else None
            if convention is not None:  # GPT-J's (x [B, S, H, D], sin, cos), each angle once
                out[name] = table_replacement(rot, value, convention)
                kinds.add(rot.kind)
                break
    return out, kinds


_PROXIES: dict[tuple, types.ModuleType] = {}


def _functional_proxy(replacements: dict[str, Callable]) -> types.ModuleType:
    """A stand-in for ``torch.nn.functional`` whose ``scaled_dot_product_attention`` / ``gelu``
    are ours."""
    return _namespace_proxy(F, replacements)


def _namespace_proxy(namespace: types.ModuleType, replacements: dict[str, Any]) -> types.ModuleType:
    """A stand-in for the module ``namespace`` (``torch``, ``torch.nn``, ``torch.nn.functional``)
    with the attributes in ``replacements`` swapped, made once per (module, replacements)."""
    key = (namespace.__name__, *sorted((k, id(v)) for k, v in replacements.items()))
    proxy = _PROXIES.get(key)
    if proxy is None:
        proxy = types.ModuleType(f"autokernel_{namespace.__name__.replace('.', '_')}")
        proxy.__dict__.update({k: v for k, v in vars(namespace).items() if not k.startswith("__")})
        proxy.__dict__.update(replacements)
        _PROXIES[key] = proxy
    return proxy


def _without_head_copies(fn: types.FunctionType, names: dict[str, Any]) -> types.FunctionType | None:
    """``fn`` with some of its globals rebound and the heads' copies it writes before its attention
    call dropped (``head_copies``: the ops take the head-strided views); None when it writes none."""
    parsed = parse_forward(fn)
    if parsed is None:
        return None
    tree, fdef = parsed
    return compile_forward(fn, tree, names) if drop_head_copies(fdef) else None


def _rebound(fn: types.FunctionType, names: dict[str, Any]) -> types.FunctionType:
    """``fn`` with some of its globals rebound (``rewrite.rebound_globals``)."""
    new = types.FunctionType(fn.__code__, rebound_globals(fn, names), fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    return new


# the kinds whose ops the functions a module's methods call are rebound to
CALL_KINDS = frozenset({"attention", "attention_masked", "rotary", "gelu", "attention_rotary", "attention_softcap",
                        "attention_sinks", "rotary_interleaved", "attention_cross", "rotary_pairs_to_halves",
                        "softmax", "matmul"})


def _apply_calls(model, kops: list[KernelOp], done_calls: set[int], replaced, skipped) -> None:
    """Attention (SDPA), rotary, F.gelu, F.softmax and F.linear: rebind the functions a module's
    methods call."""
    if not any(k.kind in CALL_KINDS for k in kops):
        return
    made_here: dict[tuple, type] = {}
    for name, m in model.named_modules():
        if id(m) in done_calls or isinstance(m, (nn.Linear, nn.LayerNorm)):
            continue
        att = _pick(kops, "attention", name)
        masked = _pick(kops, "attention_masked", name)
        rot = _pick(kops, "rotary", name)
        gel = _pick(kops, "gelu", name)
        fused = _pick(kops, "attention_rotary", name)
        capped = _pick(kops, "attention_softcap", name)
        sinks = _pick(kops, "attention_sinks", name)
        pairs = _pick(kops, "rotary_interleaved", name)
        cross = _pick(kops, "attention_cross", name)
        halves = _pick(kops, "rotary_pairs_to_halves", name)
        # functional softmax and linear: only in a module the problem names itself (a router), not
        # one around it (the matmul problem names nearly every layer's parents)
        soft = next((k for k in kops if k.kind == "softmax" and name in k.problem.modules), None)
        lin = next((k for k in kops if k.kind == "matmul" and name in k.problem.modules), None)
        if gel is not None and gelu_form(m) is not None:
            gel = None  # a GELU activation module: switched (or left alone) as a module in `fused`
        chosen = (att, masked, rot, gel, fused, capped, sinks, pairs, cross, halves, soft, lin)
        if all(k is None for k in chosen):
            continue
        eager_masked = masked is not None and plain_eager_attention(m)
        eager_sinks = sinks is not None and sink_eager_attention(m)
        key = (type(m), "calls", eager_masked, eager_sinks) + tuple(k.identity if k else None for k in chosen)
        alike = (type(m), eager_masked, eager_sinks) + tuple(map(id, chosen))  # the same ops: the same class
        if alike not in made_here:
            made = _calls_subclass(type(m), att, rot, gel, masked, fused, capped, eager_masked,
                                   sinks if eager_sinks else None, pairs, cross, halves, soft, lin)
            made_here[alike] = kept_class(key, class_members(made), lambda: made)
        cls = made_here[alike]
        kinds = set(cls._autokernel_kinds)
        if "matmul" in kinds and not keep_transposed(m, lin.dtype):
            kinds.discard("matmul")  # no weight of its own for the linear to take: its calls go to PyTorch
        if not kinds:
            continue
        m.__class__ = cls
        done_calls.add(id(m))
        for kind in sorted(kinds):
            replaced.append((name, kind))


# transformers' base classes of every model (PreTrainedModel, the generation mixin): their methods
# name the attention functions only to check or set the attention implementation, and compute none
_LIBRARY_BASES = ("transformers.modeling_utils", "transformers.generation.")


def _calls_subclass(base: type, att: KernelOp | None, rot: KernelOp | None, gel: KernelOp | None = None,
                    masked: KernelOp | None = None, fused: KernelOp | None = None,
                    capped: KernelOp | None = None, eager_masked: bool = False,
                    eager_sinks: KernelOp | None = None, rotary_pairs: KernelOp | None = None,
                    cross: KernelOp | None = None, pairs_to_halves: KernelOp | None = None,
                    softmax: KernelOp | None = None, linear: KernelOp | None = None) -> type:
    """A subclass of ``base`` whose methods that call SDPA / a rotary function / F.gelu call
    the ops instead (``_autokernel_kinds`` empty when there is none; ``capped``: transformers' eager
    attention with soft-capped scores, ``attention_softcap``; ``eager_masked``: its plain calls
    with a mask to ``masked``'s op, the function probed; ``eager_sinks``: its calls with the
    module's sinks to that op, ``attention_sinks``, the function probed; ``rotary_pairs``: a rotary
    function on interleaved pairs, ``rotary_interleaved``; ``pairs_to_halves``: one reading pairs
    and writing halves, ``rotary_pairs_to_halves``; ``cross``: SDPA calls without
    causality whose query and key lengths differ, ``attention_cross``; ``softmax``, ``linear``:
    ``F.softmax`` / ``torch.softmax`` and ``F.linear`` calls, ``functionals``); with ``fused``, a method
    that rotates q and k and hands them to attention runs the ``attention_rotary`` op
    (``rotary_attention``) on the calls it can."""
    from .rotary_attention import fused_method

    sdpa = _sdpa_replacement(att, masked, cross) if any(op is not None for op in (att, masked, cross)) else None
    sdpa_kinds = tuple(kind for kind, op in (("attention", att), ("attention_masked", masked), ("attention_cross", cross))
                       if op is not None)
    gelu = _gelu_replacement(gel) if gel is not None else None
    soft = (softmax_replacement(softmax), softmax_replacement(softmax, torch.softmax)) if softmax is not None else None
    lin = linear_replacement(linear) if linear is not None else None
    members: dict[str, Any] = {}
    kinds: set[str] = set()
    for klass in base.__mro__:
        if klass in (nn.Module, object):
            break
        if klass.__module__.startswith(_LIBRARY_BASES):
            continue
        for attr, fn in vars(klass).items():
            if attr in members or not isinstance(fn, types.FunctionType):
                continue
            inner = inspect.unwrap(fn)  # a decorated method: the calls are in the function it wraps
            if not isinstance(inner, types.FunctionType):
                continue
            names, kinds_fn = _global_replacements(inner, sdpa, rot, gelu, sdpa_kinds, capped,
                                                   masked if eager_masked else None, eager_sinks, rotary_pairs,
                                                   pairs_to_halves, soft, lin)
            both = fused_method(inner, names, fused, rot) if fused is not None else None
            if both is not None:
                kinds_fn = kinds_fn | {"attention_rotary"}
            elif kinds_fn & set(sdpa_kinds):  # its attention reaches our ops: its heads' copies go
                both = _without_head_copies(inner, names)
            new = rewrap(fn, both if both is not None else _rebound(inner, names)) if names or both else None
            if new is not None:
                members[attr] = new
                kinds |= kinds_fn
    members["_autokernel_kinds"] = tuple(sorted(kinds))
    return type(f"Autokernel{base.__name__}", (base,), dict(members, __module__=base.__module__))
