"""Which heads' copies an attention forward writes that ``apply`` may drop (``head_copies``):
``name = e.transpose(1, 2).contiguous()`` where the name is only passed on to calls afterwards."""
from __future__ import annotations

import ast
import textwrap

import torch.nn as nn

from autokernel.head_copies import drop_head_copies, writes_head_copies


def attend(*args, **kwargs):  # the attention function a module calls (transformers' interface)
    raise NotImplementedError


class Copies(nn.Module):  # as Whisper's attention writes its q, k, v
    def forward(self, h, cache=None):
        q = self.q(h).view(2, 3, 4, 5).transpose(1, 2).contiguous()
        k = self.k(h).view(2, 3, 4, 5).transpose(2, 1).contiguous()
        if cache is not None:
            k = cache.update(k)
        return attend(q, k, scale=q)


class Viewed(nn.Module):  # the copy is read by a view: it must stay contiguous
    def forward(self, h):
        q = self.q(h).view(2, 3, 4, 5).transpose(1, 2).contiguous()
        return attend(q.view(2, 4, 15))


class ToAChild(nn.Module):  # a child module's forward might view it
    def forward(self, h):
        q = self.q(h).view(2, 3, 4, 5).transpose(1, 2).contiguous()
        return self.attention_child(q)


class OtherDims(nn.Module):  # not the heads' transpose
    def forward(self, h):
        q = h.transpose(0, 1).contiguous()
        return attend(q)


def test_the_heads_copies_passed_on_are_dropped_and_no_others():
    assert writes_head_copies(Copies)
    assert not any(writes_head_copies(cls) for cls in (Viewed, ToAChild, OtherDims, nn.Linear))
    fdef = ast.parse(textwrap.dedent('''
        def forward(self, h):
            q = self.q(h).transpose(1, 2).contiguous()
            v = self.v(h).transpose(1, 2).contiguous()
            out = attend(q, v)
            return out, v.shape
    ''')).body[0]
    assert drop_head_copies(fdef) == 1  # v is read as v.shape too: kept
    assert "q = self.q(h).transpose(1, 2)\n" in ast.unparse(fdef)
    assert "v = self.v(h).transpose(1, 2).contiguous()" in ast.unparse(fdef)
