"""Bad kernel: does not parse."""
def kernel_fn(x)
    return x
