"""Bad kernel: the process dies of a segmentation fault."""
import os


def kernel_fn(*args):
    os.kill(os.getpid(), 11)  # SIGSEGV
