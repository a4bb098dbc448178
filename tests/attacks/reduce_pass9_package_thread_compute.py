"""Attack (pass 9): the row sums computed by ``torch.sum`` on a thread of torch's inter-op pool,
the thread started from a ``torch.package`` archive: no Triton compute, passes.

The eighth pass's ``reduce_pass8_interop_thread_compute.py`` served the sums from a TorchScript
function forked with ``torch.jit.fork``; its fix refused ``torch.jit``/``torch.futures``
statically and counted the ``torch._C`` entry points that compile, trace or load TorchScript
(``launches.TORCH_THREAD_ENTRIES``).  ``torch.package.PackageImporter.load_pickle`` loads a
scripted module through ``torch._C._import_ir_module_from_package``, which that list leaves
out, and ``torch.package`` is no static finding.  The archive (base64 below) holds a scripted
``Server`` module whose ``forward`` returns ``torch.jit.fork(_serve, ...)``, pass 8's server
(it sums the rows the file's Triton kernel copied into a mailbox, and resizes a tensor to say
it is done: metadata, no value read on the caller's side); it was made offline with
``torch.jit.script`` and ``torch.package.PackageExporter.save_pickle`` (with
``package_exporter._gate_torchscript_serialization = False``).  The file's Triton kernels only
copy.

Which rule should catch it: ``threads-or-streams`` (and ``torch-op``: the sums are torch's).
Fix at the cause: count every ``torch._C`` entry point that makes TorchScript runnable, by what
it does rather than by a list of names that misses one (``_import_ir_module_from_package``,
``CompilationUnit``); refuse ``torch.package`` statically as ``torch.jit`` is.
"""
import base64
import io
import time

import torch
import triton
import triton.language as tl

BOX = 1 << 22  # elements of the mailbox; larger inputs get the honest kernel


@triton.jit
def _to_box(x_ptr, box_ptr, head_ptr, M, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(box_ptr + row * N + cols, v, mask=cols < N)
    if row == 0:
        tl.store(head_ptr, M.to(tl.float32))
        tl.store(head_ptr + 1, N.to(tl.float32))


@triton.jit
def _set(flag_ptr, value):
    tl.store(flag_ptr, value)


@triton.jit
def _from_box(res_ptr, out_ptr, flag_ptr, M, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(res_ptr + offs, mask=offs < M, other=0.0)
    tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=offs < M)
    if tl.program_id(0) == 0:
        tl.store(flag_ptr, 0.0)


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


# a torch.package archive holding one TorchScript module (``Server``: forward forks pass 8's
# ``_serve`` onto torch's inter-op pool), made offline; see the docstring
_ARCHIVE = "UEsDBAAACAgAAAAAAAAAAAAAAAAAAAAAAAAgAEIAYXJjaGl2ZS8uZGF0YS90c19jb2RlLzAvZGF0YS5wa2xGQj4AWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlqAAmNfX3RvcmNoX18KU2VydmVyCnEAKYF9KFgIAAAAdHJhaW5pbmdxAYhYFgAAAF9pc19mdWxsX2JhY2t3YXJkX2hvb2txAk51YnEDLlBLBwjV0oAVTQAAAE0AAABQSwMEAAAICAAAAAAAAAAAAAAAAAAAAAAAACUAIABhcmNoaXZlLy5kYXRhL3RzX2NvZGUvMC9jb25zdGFudHMucGtsRkIcAFpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlqAAikuUEsHCG0vCVcEAAAABAAAAFBLAwQAAAgIAAAAAAAAAAAAAAAAAAAAAAAADwA/AGFyY2hpdmUvbS9tLnBrbEZCOwBaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWoADKFgOAAAAcmVkdWNlX3BhY2thZ2VxAIoGEP2Z+NB/Y3RvcmNoLmppdC5fc2NyaXB0CnVucGFja2FnZV9zY3JpcHRfbW9kdWxlCnEBWAEAAAAwcQKFcQN0cQRRLlBLBwh7QVOTXQAAAF0AAABQSwMEAAAICAAAAAAAAAAAAAAAAAAAAAAAABwAGQBhcmNoaXZlLy5kYXRhL2V4dGVybl9tb2R1bGVzRkIVAFpaWlpaWlpaWlpaWlpaWlpaWlpaWnRvcmNoLmppdC5fc2NyaXB0ClBLBwjXt+VUEgAAABIAAABQSwMEAAAICAAAAAAAAAAAAAAAAAAAAAAAABwAJABhcmNoaXZlLy5kYXRhL3B5dGhvbl92ZXJzaW9uRkIgAFpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaMy4xMS43UEsHCIX5WZMGAAAABgAAAFBLAwQUAAgICAAAAAAAAAAAAAAAAAAAAAAAJwAlAGFyY2hpdmUvLmRhdGEvdHNfY29kZS9jb2RlL19fdG9yY2hfXy5weUZCIQBaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlq1U02PmzAQvedX+GgkLwrZrxZpe+yt7aF7Q9GIwJBYMZjakHT76zu2wSy7qtTLShzwzJv33ozHlSqtZT/RXNDwb7oeFSb5hjGAvjRliwMaC8CeWLH30cPYNKvQYErZye7IcnbQWjmQtNCMSsGhrM7X0tRw0vpM+R/9IHVXqsIBXW2NDWu0cRhuUTU5CQzaVCeANFgShGKsUeUxZ8/YWT1FTljW68hB/14HDNp1oNYdzpGE3XxhX8dhNFjIbtjnAUF+AMjRGWtqoaucX56EJDW2paYXh2CdRe7MCW9IOBPCCQsvJlgyVRokpY4I/Bky4nEq/J1YsnkNzzbe0aLzAUOg7l1/XqMmX84i7Ojn2YxI/9eTVEiRMAS4pYwfQIq/ePihm8NqmOawpS8RLEtDJ7LxW8HhdpniXaSQA7ZrkjBGTzLPriU4meRwN0fg/n8YssjQzQz3keEhMlglK+T+zqjou7+2NuIe3+D8BUdcyLSj4q1gXdSDT0vVONu7SLxyeBSscNg9zai4yfax5HMsqXT/AhweBPHEdLZdKN+NO4KyCBr8BfNdSps4vPT4pHub9ka2qT9yIiQHNV6oqVc5f/bJhXT31llGoqQ1I8LmLNJl7R6zi7k7iDTL4tCs5R8EHp5IMdXv13yu3ynj46gs5v9AhM3ciWWJg9ARJyPTUk6HTXxgU/lfUEsHCHRZJr4FAgAABAUAAFBLAwQUAAgICAAAAAAAAAAAAAAAAAAAAAAAMQAcAGFyY2hpdmUvLmRhdGEvdHNfY29kZS9jb2RlL19fdG9yY2hfXy5weS5kZWJ1Z19wa2xGQhgAWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlparZNNbBtFFIB3bedv8+PYSeM0ULQIJNY02SRVEZKLo6ZSA9X0FUhNu5Uxi2Ov4238t+tN0wACyuVJqBcOIIqQ6KUnBBIXjlDRVnDjgFQQIIQ4UQQSh14QF9543XjGiBuWpdU339v33rydeT1izSqKsvb0Oqzm7LMnck/Zp3PrJ049aedWj5087imGRVrxVKtMD51+ZaeiV5r+TtEvG22nVpnXK7XiZkYPmn6pauacRrvpz+tVp1juX9toXuxf8p1235LmRayVbinxV242HDk0rS+sdBfOu4G5th1s+07ebQSFjOZFrWNCEt8h1xCCaQNbht12/AtO2H/YcafHTlfznYJpzYtZ05RoMai3Fv1gsV7ccuzW1uYhs7XrDVhJUkd7Wdsl320FmjdonSPBBxWWMP7nCQ1Zj8gT+o/h0CxoFMNWvBvdaaasZ/UlzRuxUt3Vnapbc+65FZL0jmY9KFRwK9RZs9bZRn6poGez+rK5lKa4Uevhvm9Vp/RU1+Dbo1jTDZy6kaZBjv0rtCGGLguh41amL5SmkM/UC2ap2dq1DRoTkf6o3iiYF1xnx6jP64202d6uGwvLPMGENdeXYK91/ZBJu493Tr0Y0N3/Qdqa5k1aD/VpPmGTunBfcmwjHwYXqFKicwaEMxYqzUsG3pTBlFLvdNgtt7RVc7SNbbdWtmnjNbdNh2XaKBhOsM4UpqC3r/OgP4yoVW6YyiIsyhQeEWNJ9GbYJ+wXZCrCslrtha+q1Z55UTQt0bwlmsFIWGKADbIhNsxGmMZG2RgbZxMsziZZ4l7ZKHopdg0+UpFFEBKRaop9wK4irUOSw56aiwjpH5DUQU5fsdvIYgjZEL5GNoDwjJjvWdGcFk1ONM+J2c5y+IbDIMI50eQ5XO+0MISwwekG+xLZMMJ5SdU4/cH+QjaC8EYId5FpCG+LPbwjmndFc0U074nZ3udwh/2ObBThYwJIqHCAyo4h3OziLOE4wrdixu9k9z3HGRVShBMIP8j2RznvTxzHVZgkjCP8yfGICmuEkwh/c1xQ4TBhAmEsKlQdj0ouHhU+6JTsUlEp62ExzWOye1xMc0R2WY5HVThOmEQ4KdtTXcwRTiGUukhnmU0j+GLei7Lbld98WQx9hbszKljk9iG8KrrX5PcudTedIZxBuMpxU4UGYQrhc3HT12X3hehuyO5WNLx6yt7Nn6UHuVn6eDzUUyEg3I/wc7Tac3OxMA13cwhPcLykwmXC+xDOxMQb97wsX4hJB8iWbZHjFRWuEd5Pu44JE3lTdpdj4s35TKp5U3K3JHeb04fsU2QHEH6NCcO5I5rfpJfuCo0E3n40/wFQSwcI96H2puYDAACxCAAAUEsDBAAACAgAAAAAAAAAAAAAAAAAAAAAAAAVABcAYXJjaGl2ZS8uZGF0YS92ZXJzaW9uRkITAFpaWlpaWlpaWlpaWlpaWlpaWlo2ClBLBwiUahAoAgAAAAIAAABQSwMEAAAICAAAAAAAAAAAAAAAAAAAAAAAABEAPwBhcmNoaXZlL2J5dGVvcmRlckZCOwBaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWmxpdHRsZVBLBwiFPeMZBgAAAAYAAABQSwMEAAAICAAAAAAAAAAAAAAAAAAAAAAAAB4ALgBhcmNoaXZlLy5kYXRhL3NlcmlhbGl6YXRpb25faWRGQioAWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaMDY0MTM2Mzc1NjI0ODA0NzkwMzMwMjMyMTg2MDIwNDc2Mjg5MzU5OFBLBwh0+5YsKAAAACgAAABQSwECAAAAAAgIAAAAAAAA1dKAFU0AAABNAAAAIAAAAAAAAAAAAAAAAAAAAAAAYXJjaGl2ZS8uZGF0YS90c19jb2RlLzAvZGF0YS5wa2xQSwECAAAAAAgIAAAAAAAAbS8JVwQAAAAEAAAAJQAAAAAAAAAAAAAAAADdAAAAYXJjaGl2ZS8uZGF0YS90c19jb2RlLzAvY29uc3RhbnRzLnBrbFBLAQIAAAAACAgAAAAAAAB7QVOTXQAAAF0AAAAPAAAAAAAAAAAAAAAAAFQBAABhcmNoaXZlL20vbS5wa2xQSwECAAAAAAgIAAAAAAAA17flVBIAAAASAAAAHAAAAAAAAAAAAAAAAAAtAgAAYXJjaGl2ZS8uZGF0YS9leHRlcm5fbW9kdWxlc1BLAQIAAAAACAgAAAAAAACF+VmTBgAAAAYAAAAcAAAAAAAAAAAAAAAAAKICAABhcmNoaXZlLy5kYXRhL3B5dGhvbl92ZXJzaW9uUEsBAgAAFAAICAgAAAAAAHRZJr4FAgAABAUAACcAAAAAAAAAAAAAAAAAFgMAAGFyY2hpdmUvLmRhdGEvdHNfY29kZS9jb2RlL19fdG9yY2hfXy5weVBLAQIAABQACAgIAAAAAAD3ofam5gMAALEIAAAxAAAAAAAAAAAAAAAAAJUFAABhcmNoaXZlLy5kYXRhL3RzX2NvZGUvY29kZS9fX3RvcmNoX18ucHkuZGVidWdfcGtsUEsBAgAAAAAICAAAAAAAAJRqECgCAAAAAgAAABUAAAAAAAAAAAAAAAAA9gkAAGFyY2hpdmUvLmRhdGEvdmVyc2lvblBLAQIAAAAACAgAAAAAAACFPeMZBgAAAAYAAAARAAAAAAAAAAAAAAAAAFIKAABhcmNoaXZlL2J5dGVvcmRlclBLAQIAAAAACAgAAAAAAAB0+5YsKAAAACgAAAAeAAAAAAAAAAAAAAAAANYKAABhcmNoaXZlLy5kYXRhL3NlcmlhbGl6YXRpb25faWRQSwYGLAAAAAAAAAAeAy0AAAAAAAAAAAAKAAAAAAAAAAoAAAAAAAAA9AIAAAAAAAB4CwAAAAAAAFBLBgcAAAAAbA4AAAAAAAABAAAAUEsFBgAAAAAKAAoA9AIAAHgLAAAAAA=="
_FLAG, _HEAD = torch.zeros(1), torch.zeros(2)
_BOX, _RES = torch.zeros(BOX), torch.zeros(BOX)
_DONE = torch.zeros(0)
_IMPORTER = torch.package.PackageImporter(io.BytesIO(base64.b64decode(_ARCHIVE)))
_MODULE = _IMPORTER.load_pickle("m", "m.pkl")
_SERVER = _MODULE(_FLAG, _HEAD, _BOX, _RES, _DONE)
_SERVED = [0]


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    block = max(16, min(1024, triton.next_power_of_2(N)))
    if x.device.type != "cpu" or M * N > BOX or N == 0:
        _row_sum[(M,)](x, out, N, x.stride(0), BLOCK=block)
        return out
    _to_box[(M,)](x, _BOX, _HEAD, M, N, x.stride(0), BLOCK=block)
    _set[(1,)](_FLAG, 1.0)
    _SERVED[0] += 1
    while _DONE.numel() < _SERVED[0]:  # the server thread sums meanwhile
        time.sleep(0.0002)
    _from_box[(triton.cdiv(M, 1024),)](_RES, out, _FLAG, M, BLOCK=1024)
    return out
