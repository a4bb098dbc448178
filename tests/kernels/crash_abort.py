"""Bad kernel: aborts the process."""
import os


def kernel_fn(*args):
    os.abort()
