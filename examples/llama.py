"""A small LLaMA-style decoder: RMSNorm, rotary position embeddings (the ``rotate_half``
layout), grouped-query attention through ``F.scaled_dot_product_attention`` and a SwiGLU MLP.
No biases, no ``transformers``.

The defaults are tiny so that it runs on a CPU.  Make it bigger with a config, e.g. close to
LLaMA-2-7B's layer shapes::

    Llama(LlamaConfig(dim=4096, n_layers=4, n_heads=32, n_kv_heads=8, hidden_dim=11008,
                      vocab_size=32000))

or on the command line::

    autokernel profile --model llama --dtype bf16 --input-shape 1x1024 \\
        --config dim=4096,n_layers=4,n_heads=32,n_kv_heads=8,hidden_dim=11008,vocab_size=32000
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    vocab_size: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2  # fewer than n_heads: grouped-query attention
    hidden_dim: int = 176  # SwiGLU hidden size, about 8/3 of dim
    max_seq_len: int = 4096
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self):
        for name, value in vars(self).items():  # every size, eps and base here is positive
            if not isinstance(value, bool) and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.dim % self.n_heads or (self.dim // self.n_heads) % 2:
            raise ValueError(f"dim {self.dim} must split into {self.n_heads} heads of even size")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")


class RMSNorm(nn.Module):
    """Hugging Face LLaMA semantics: normalize in fp32, cast back, then scale.

    ``norm(x, residual)`` first adds the residual stream and returns ``(norm(s), s)`` with
    ``s = x + residual``: the add and the norm are one fused problem (``add_rmsnorm``)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is not None:
            s = x + residual
            return self._norm(s), s
        return self._norm(x)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [max_seq_len, head_dim] for the rotate_half layout."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Rotate q [B,H,S,D] and k [B,Hkv,S,D] by the angles in cos/sin [S,D]."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        q = self.wq(x).view(B, S, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(y.transpose(1, 2).reshape(B, S, -1))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.up = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.down = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor):
        """``h + residual`` is the block's input (``residual`` None: ``h`` alone); returns the
        block's output in the same two parts, so that each residual add happens inside the
        next norm."""
        if residual is None:
            x, residual = self.attn_norm(h), h
        else:
            x, residual = self.attn_norm(h, residual)
        h = self.attn(x, cos, sin)
        x, residual = self.mlp_norm(h, residual)
        return self.mlp(x), residual


class Llama(nn.Module):
    def __init__(self, config: LlamaConfig | None = None):
        super().__init__()
        cfg = config or LlamaConfig()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        S = input_ids.shape[1]
        if S > self.config.max_seq_len:
            raise ValueError(f"sequence length {S} exceeds max_seq_len {self.config.max_seq_len}")
        x = self.embed(input_ids)
        cos, sin = self.rope_cos[:S].to(x.dtype), self.rope_sin[:S].to(x.dtype)
        h, residual = x, None
        for layer in self.layers:
            h, residual = layer(h, residual, cos, sin)
        x = self.norm(h) if residual is None else self.norm(h, residual)[0]
        return self.lm_head(x)
