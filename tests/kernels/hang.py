"""Bad kernel: never returns."""
import time


def kernel_fn(*args):
    while True:
        time.sleep(0.05)
