"""autokernel: make PyTorch models faster by optimizing their GPU kernels autonomously."""
__version__ = "0.1.0"


def apply(model, workdir, **options):
    """Return ``model`` with the winning kernels of the run in ``workdir`` put in.  ``options``:
    ``inplace``, ``allow_slower``, ``cuda_graphs``, ``under_compile`` (``autokernel.integrate.apply``)."""
    from .integrate import apply as _apply

    return _apply(model, workdir, **options)
