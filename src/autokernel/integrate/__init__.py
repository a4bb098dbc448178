"""Put the winning kernels of a run back into a model (``autokernel.apply``).

For each problem of ``<workdir>/plan.json`` whose best kernel exists at
``<workdir>/problems/<name>/kernel.py``, the kernel's ``kernel_fn`` is registered as a PyTorch
custom op ``autokernel::<name>_<hash>`` (``torch.library.custom_op`` with a fake
implementation, so ``torch.compile`` treats it as one opaque call) and the places of the model
that compute that kind are switched to it:

* ``rmsnorm``   — modules named ``*RMSNorm*`` (or ``torch.nn.RMSNorm``) with a 1-D weight;
* ``layernorm`` — ``torch.nn.LayerNorm`` over the last dim with weight and bias;
* ``softmax``   — ``torch.nn.Softmax(dim=-1)``, and ``F.softmax`` / ``torch.softmax`` calls over the
  last dim in the forward of a module the problem names (the MoE routers': ``functionals``);
* ``swiglu`` / ``fused_mlp`` — MLP modules with gate/up/down linears (``gate_proj``/``up_proj``/
  ``down_proj``, ``w1``/``w3``/``w2``, ...) and a SiLU;
* ``attention`` — modules whose methods call ``F.scaled_dot_product_attention`` (or reach it
  through transformers' ``ALL_ATTENTION_FUNCTIONS``), calls without a mask;
* ``attention_masked`` — the same calls with a bool or additive ``attn_mask`` broadcastable to
  [B, H, S, S] (padded batches; what transformers runs while a stream captures), and attention
  written out in a forward (MPT's: scores, + bias, masked_fill, fp32 softmax, @ v; BLOOM's:
  alibi.baddbmm(q, k^T), + mask, fp32 softmax, bmm with v), whose forward is rewritten with the
  bias and mask as one additive mask (``scores_statements`` finds the statements,
  ``scores_attention`` rewrites them);
* ``rotary``    — modules whose methods call a ``*rotary*``/``*rope*`` function of the
  ``rotate_half`` layout;
* ``attention_rotary`` — the same rotary call on q and k followed by attention on them, in one
  op, where the forward's source and a probe confirm it (``rotary_attention``);
* ``matmul``    — ``torch.nn.Linear`` and patch convolutions (ViT's ``Conv2d`` with stride = kernel, as the
  GEMM of its patches), and ``F.linear(x, self.weight)`` calls in the forward of a module the
  problem names (the MoE routers': ``functionals``), only when a kept kernel beat the starting kernel;
* ``cross_entropy`` — ``torch.nn.CrossEntropyLoss`` with default settings;
* ``add_rmsnorm`` / ``add_layernorm`` — norms called as ``norm(x, residual)``, post-norm output
  blocks, residual adds written just before a plain norm call (the forward holding both is
  rewritten: ``residuals``), and the add ending a decoder layer, fused ahead into the next
  layer's first norm or the final norm (``residual_ahead.add_ahead``); ``gelu``, ``geglu``, ``swiglu_packed``, ``geglu_packed`` — see ``fused``;
* ``linear_gelu`` / ``linear_relu`` / ``linear_relu2`` — modules whose forward is ``act(linear(x))``
  (an ``nn.Linear``, with a bias or without one (T5's ``wi``: the op gets zeros), or GPT-2
  ``Conv1D``; a GELU module, an ``nn.ReLU``, or a squared-ReLU module: Nemotron's and Arcee's
  ``ACT2FN["relu2"]``) then a chain of other children, or has such a pair inside a longer forward
  (OPT's layers: rewritten; the ReLU may be a ``torch.relu`` / ``F.relu`` call there, and the
  squared ReLU ``torch.square(torch.relu(...))`` calls, as in RWKV's feed-forward) (``epilogues``);
* ``embedding`` — ``torch.nn.Embedding`` (and scaled subclasses, and subclasses whose forward
  hands ids to ``super().forward``: learned position embeddings at an offset); ``rotary_table`` — default-RoPE
  ``*RotaryEmbedding`` modules (``tables``);
* ``moe_experts`` — mixture-of-experts experts modules with 3-D SwiGLU weights (Mixtral's,
  Qwen-MoE's), or with [E x I, D] blocks, packed once (DBRX's; ``experts``);
* ``relative_position_bias`` — T5-style attention modules holding a relative position bias
  table: their ``compute_bias`` (``position_bias``);
* ``xielu`` — xIELU activation modules (transformers' ``XIELUActivation``: Apertus' MLP), the op
  handed the module's softplus'd numbers (``xielus``);
* ``shifted_windows`` — Swin layers (transformers' ``SwinLayer``): the forward's pad + cyclic shift +
  window partition, and window reverse + shift back, each one op call (``windows``);
* ``window_bias`` — the same layers' attention mask (relative position bias + the shift's region
  mask): the layer's ``get_attn_mask`` call and its attention's bias + mask statements become one
  op call (``windows``);
* ``selective_scan`` and ``causal_conv1d`` — Mamba mixers (transformers' ``MambaMixer``): their
  forward's calls of ``mamba_selective_scan`` and ``causal_conv1d_fn``, direct or through
  ``mamba_scan_forward`` and ``causal_conv1d_forward``, go to the ops (``scans``).

Which kernels: when the workdir has ``results.tsv``, only a kernel the harness passed (its
best row is timed, with no failed stage); on a GPU run (``plan.time_kind == "gpu"``) not one
whose best time is slower than PyTorch eager, unless ``allow_slower``.

A module is switched by giving it a generated subclass of its own class (``__class__``
swap): parameters, ``state_dict`` keys and ``isinstance`` stay as they were.  The new
``forward`` calls the op only when the call is one the kernel was judged on (dtype, device,
head dim, no mask, ...), decided by checking the arguments, and otherwise runs the original
code.  A kernel that fails on a call it accepted raises: nothing is caught.  Norm and MLP
classes are first probed: their original ``forward`` on a small random input is compared
with the problem's PyTorch reference, so that a module that only looks like the kind (say a
``(1 + weight)`` RMSNorm) is left alone.  The kernel is not run by ``apply``.

The returned model is a deep copy (``inplace=True`` patches the given model).  It is meant
for inference: the ops have no backward; and it cannot be pickled (its classes are generated):
save the original's ``state_dict`` and ``apply`` again after loading.  What was switched is in
``model._autokernel_replaced`` (list of ``(module name, kind)``); what was not, and why, in
``model._autokernel_skipped`` (list of ``(problem or module, reason)``).

On CPU the Triton kernels run only under the interpreter (``TRITON_INTERPRET=1``, set
before the first kernel is imported); without it nothing is switched.

Layout: ``runfiles`` (the run's files), ``ops`` (custom-op registration), ``selection`` (which
kernels may be applied), ``patching`` (class swap, probes), ``norms`` / ``linears`` / ``calls``
/ ``fused`` / ``residuals`` / ``scores_attention`` (with ``scores_statements``) / ``embeddings`` / ``tables`` / ``epilogues`` / ``experts`` (the appliers per
kind),
``alignment`` (on a GPU, half-precision linears with misaligned output rows padded: no kernel
of ours, the same GEMM on aligned rows), ``apply`` (the entry point).
"""
from __future__ import annotations

from .apply import apply, dumps_summary, summary
from .ops import OP_CALLS, OP_NAMESPACE, OP_PROBLEMS, SCHEMAS, keeps_layout, op_problems, output_meta, register_kernel_op
from .runfiles import (KEPT_STATUSES, IntegrateError, as_float, best_rows, judged_correct, kernel_path,
                       load_workdir_plan, read_results)
from .selection import KernelOp, Selection, select_kernels

__all__ = ["apply", "dumps_summary", "summary", "OP_CALLS", "OP_NAMESPACE", "OP_PROBLEMS", "SCHEMAS",
           "keeps_layout", "op_problems", "output_meta", "register_kernel_op", "KEPT_STATUSES",
           "IntegrateError", "as_float", "best_rows", "judged_correct", "kernel_path", "load_workdir_plan",
           "read_results", "KernelOp", "Selection", "select_kernels"]
