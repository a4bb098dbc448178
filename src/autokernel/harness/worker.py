"""The worker process: the only place untrusted kernel code runs.  This module states the
protocol and gathers the names other modules use; the code lives in
``worker_client`` (parent side), ``worker_main`` (worker side: the request loop and the judged
calls), ``watch`` (the dispatch mode), ``output_checks``, ``gpu_cover``, ``worker_errors`` and
``problem_spec``.

Parent side: ``Worker`` starts a process with the ``spawn`` context (``TRITON_INTERPRET=1`` in
its environment when the device is the CPU, removed otherwise), sends requests over a pipe and
waits for each answer with a deadline.  No answer by the deadline: the process is killed and
``WorkerTimeout`` raised.  The process died (segfault, abort, CUDA fault): ``WorkerCrash``
with the exit signal.

Requests go parent -> worker as pickles (the worker unpickles what the judge made: input
tensors in shared memory / CUDA IPC, and the parent's own output buffers; in a ``call`` these
come sealed, pickled again as bytes the worker opens only around its copies, so that none of
the parent's memory is mapped in the worker while a call runs).  Answers go worker
-> parent as plain data only (transport.py): the parent decodes them with an unpickler that
refuses every global, so nothing the candidate made can come alive in the judge.  Output
values come back by the worker copying them into the parent's buffers.

One worker judges one kernel: ``acquire`` hands out a fresh worker (never one that loaded a
kernel before) and keeps the next ones starting in the background (``prestart``) so that the loop does
not wait for torch to import; a used worker is killed, never pooled.  The candidate and the
incumbent run in two different workers.

Worker side (``main``): stdout is pointed at stderr, torch and triton are imported, the
launch hook is installed on Triton's launch path (``launches``), a trusted Triton kernel runs
once under the watch (everything torch and triton set up lazily is in place), and the
fingerprint of the critical callables (ids and code objects, integrity.fingerprint) goes to
the parent with the ready message: the baseline lives in the parent (every built-in problem
module is imported first, so that the functions that draw inputs are in it).  Before and
after every call the worker takes what could run code outside the call (``hooks``: dispatch
and function modes, profile/trace functions, gc callbacks); a call that leaves one behind is
tampering.  Every answer carries the
digest of the baseline's names as they are now (integrity.FingerprintWatch), and the whole
current fingerprint when that differs; the parent compares.  Requests:

``load``     execute a kernel file's text as a fresh module;
``call``     call the kernel ``calls`` times on every input set given — the parent's ``sets``
             (sealed: each opened right before its first call, copied into fresh memory of the
             worker's and dropped, a later call on it getting a copy of what the call before
             it left; ``after``, the parent's buffers and sets, opened once every call is made,
             when each set as its calls left it is copied back over the parent's), or, once
             each, for timed calls sets the worker draws itself from the
             parent's ``draw`` seeds with the problem's ``make_inputs`` (taken when the problem
             was loaded, before any kernel), each right before its own call, so that no call
             can reach a later call's inputs (``_draw``; a Triton launch during a draw or copy is
             tampering): either way the kernel gets tensors the worker just made, and nothing
             tells one kind from the other —
             every call judged the same way (``_judged_call``): under the ``KernelWatch``
             dispatch mode (records aten ops, poisons fresh floating allocations), timed
             (CUDA events with an L2 flush on a GPU, the wall clock in the interpreter), its
             Triton launches counted, its threads counted, and its outputs checked (plain
             tensors of the declared dtype/shape/device, allocated during the call under the
             watch, aliasing no input and no output still held, written by a Triton kernel of
             the file's own).  The outputs and inputs are kept until the next ``call``: which
             calls get their values compared is decided by the parent afterwards.  A ``call``
             whose ``after`` brings ``buffers`` (one list per call: correctness cases) has every
             call's outputs copied into them once all its calls are made, as ``collect``
             would (``collected`` in the answer);
``collect``  copy the kept outputs of the calls the parent names into the parent's buffers
             (with ``input_buffers``: also the inputs drawn for them, as they are now: the
             parent compares them bit for bit with its own draw from the same seed);
``exit``.
Errors raised by the kernel come back as one line plus the last frame in the kernel file.
The judging — references, comparisons, verdicts — happens in the parent.
"""
from __future__ import annotations

from .gpu_cover import GPU_COVER_CYCLES, GPU_COVER_US_MAX, GPU_COVER_US_MIN, host_covered, next_cover_cycles
from .integrity import fingerprint_digest
from .output_checks import check_outputs
from .problem_spec import load_problem
from .watch import make_watch_class
from .worker_client import FORKSERVER_PRELOAD, STARTUP_TIMEOUT_S, Worker, acquire, prestart, release
from .worker_errors import WorkerCrash, WorkerTimeout, describe_error, describe_exit, is_cuda_fault
from .worker_main import main

__all__ = ["GPU_COVER_CYCLES", "GPU_COVER_US_MAX", "GPU_COVER_US_MIN", "host_covered", "next_cover_cycles",
           "fingerprint_digest", "check_outputs", "load_problem", "make_watch_class", "FORKSERVER_PRELOAD",
           "STARTUP_TIMEOUT_S", "Worker", "acquire", "prestart", "release", "WorkerCrash", "WorkerTimeout",
           "describe_error", "describe_exit", "is_cuda_fault", "main"]
