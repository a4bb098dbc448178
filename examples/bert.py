"""A small BERT-style encoder: token, position and segment embeddings, post-LayerNorm blocks,
bidirectional (non-causal) attention through ``F.scaled_dot_product_attention``, a GELU MLP
and a masked-LM head.  No ``transformers``.

The defaults are tiny so that it runs on a CPU.  BERT-base is::

    Bert(BertConfig(vocab_size=30522, hidden_size=768, n_layers=12, n_heads=12,
                    intermediate_size=3072))

or on the command line::

    autokernel profile --model bert --dtype bf16 --input-shape 8x512 \\
        --config vocab_size=30522,hidden_size=768,n_layers=12,n_heads=12,intermediate_size=3072
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class BertConfig:
    vocab_size: int = 256
    hidden_size: int = 64
    n_layers: int = 2
    n_heads: int = 4
    intermediate_size: int = 256
    max_position: int = 512
    type_vocab_size: int = 2
    norm_eps: float = 1e-12

    def __post_init__(self):
        for name, value in vars(self).items():  # every size, eps and base here is positive
            if not isinstance(value, bool) and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.hidden_size % self.n_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by n_heads {self.n_heads}")


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, C = x.shape
        q, k, v = (lin(x).view(B, S, self.n_heads, C // self.n_heads).transpose(1, 2)
                   for lin in (self.query, self.key, self.value))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        return self.out(y.transpose(1, 2).reshape(B, S, C))


class MLP(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.fc_in = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc_out = nn.Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x)))


class Layer(nn.Module):
    """Post-LN: the residual sum is normalized (the original BERT order)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)
        self.mlp_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(x + self.attn(x))
        return self.mlp_norm(x + self.mlp(x))


class Bert(nn.Module):
    def __init__(self, config: BertConfig | None = None):
        super().__init__()
        cfg = config or BertConfig()
        self.config = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.emb_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.head_dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.head_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size)
        self.decoder.weight = self.word_embeddings.weight  # tied, as in BERT's MLM head

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        S = input_ids.shape[1]
        if S > self.config.max_position:
            raise ValueError(f"sequence length {S} exceeds max_position {self.config.max_position}")
        pos = torch.arange(S, device=input_ids.device)
        segments = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings(segments)
        x = self.emb_norm(x)
        for layer in self.layers:
            x = layer(x)
        return self.decoder(self.head_norm(F.gelu(self.head_dense(x))))
