"""Bad kernel: reads through a (nearly) null pointer."""
import ctypes


def kernel_fn(*args):
    return ctypes.string_at(8, 64)
