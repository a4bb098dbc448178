"""Run as a script (a process of its own: the judge's audit hook cannot be removed): arm the
judge's outside rule as a worker does, then compile a trivial Triton kernel for real (ptxas as
a process, the kernel cache written), and, if asked, with a cache manager class of this
file's that writes a file from inside ``compile`` or with another program set as ptxas.  Prints one JSON line."""
import json
import os
import sys


def _source(x_ptr):
    pass


def main() -> None:
    mode, target_file = sys.argv[1], sys.argv[2]
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource
    from triton.compiler.compiler import compile as triton_compile
    from triton.runtime.cache import FileCacheManager

    from autokernel.harness import host_reads, launches

    host_reads.install(launches.LaunchRecord(), ())
    host_reads.arm_outside()

    class Manager(FileCacheManager):
        def __init__(self, *args, **kwargs):
            with open(target_file, "w") as f:
                f.write("rewritten")
            super().__init__(*args, **kwargs)

    if mode == "manager":
        triton.knobs.cache.manager_class = Manager
    if mode == "patched":  # no setting changed: a function of Triton's replaced by one of this file's
        import triton.compiler.compiler as compiler_module

        original = compiler_module.get_cache_manager

        def get_cache_manager(key):
            with open(target_file, "w") as f:
                f.write("rewritten")
            return original(key)

        compiler_module.get_cache_manager = get_cache_manager
    if mode == "ptxas":  # another program as Triton's ptxas, past the setting's environment
        # variable (a change the rule refuses): Triton's own code would start it
        vars(triton.knobs.nvidia).update(ptxas="/bin/true", ptxas_blackwell="/bin/true")
    error = None
    try:
        triton_compile(ASTSource(fn=triton.runtime.jit.JITFunction(_source), signature={"x_ptr": "*fp32"},
                                 constexprs={}), target=GPUTarget("cuda", 90, 32))
    except Exception as exc:  # noqa: BLE001
        error = f"{type(exc).__name__}: {exc}"[:300]
    cached = sum(len(files) for _, _, files in os.walk(os.environ["TRITON_CACHE_DIR"]))
    print(json.dumps({"error": error, "refused": host_reads.REFUSED_OUTSIDE, "cached_files": cached,
                      "target_written": os.path.exists(target_file)}))


if __name__ == "__main__":
    main()
