"""GPU ceilings: a spec table, detection by device name, and measured ceilings.

``ceilings(device_name)`` returns what the roofline and the ``below-floor`` check use: the
measured ceilings when ``autokernel calibrate`` has cached them for this device, else the
vendor's published numbers from ``SPECS`` (dense, no sparsity; memory bandwidth in GB/s,
peaks in TFLOP/s).  Unknown devices and the CPU get ``None`` (no roofline).

Peaks by dtype: ``bf16``/``fp16`` are tensor-core rates with fp32 accumulation; ``fp32`` is the
TF32 tensor-core rate — the fastest any kernel can multiply fp32 data, so the floor
``flops / peak`` stays a true lower bound (``fp32_simt`` is the plain FMA rate, for reading).

``calibrate()`` measures, on the current GPU: the copy bandwidth (``dst.copy_(src)`` of 1 GiB,
bytes read + written, median of 20) and the bf16 matmul peak (8192³ ``torch.mm``, median of
10).  The measured bf16 peak stands for fp16 too; fp32 is scaled from the spec by the same
measured/spec ratio.  Results are cached as JSON in ``$AUTOKERNEL_CACHE_DIR`` or
``~/.cache/autokernel`` (``ceilings.json``, keyed by device name).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .files import write_text_atomic


@dataclass(frozen=True)
class GpuSpec:
    name: str
    pattern: str  # regex matched against the lower-cased device name
    bandwidth_gbps: float
    bf16_tflops: float
    fp16_tflops: float
    tf32_tflops: float
    fp32_simt_tflops: float


# Most specific patterns first (the first match wins).
SPECS: tuple[GpuSpec, ...] = (
    GpuSpec("H200", r"h200", 4800, 989.5, 989.5, 494.7, 66.9),
    GpuSpec("B200", r"b200", 8000, 2250, 2250, 1100, 75.0),
    GpuSpec("H100 PCIe", r"h100.*pcie", 2000, 756.5, 756.5, 378.0, 51.2),
    GpuSpec("H100 SXM", r"h100", 3350, 989.5, 989.5, 494.7, 66.9),
    GpuSpec("A100 SXM 80GB", r"a100.*sxm.*80", 2039, 312, 312, 156, 19.5),
    GpuSpec("A100 PCIe 80GB", r"a100.*80", 1935, 312, 312, 156, 19.5),
    GpuSpec("A100 40GB", r"a100", 1555, 312, 312, 156, 19.5),
    GpuSpec("L40S", r"l40s", 864, 362.1, 362.1, 183.0, 91.6),
    GpuSpec("L4", r"\bl4\b", 300, 121.0, 121.0, 60.0, 30.3),
    GpuSpec("A10", r"\ba10\b", 600, 125.0, 125.0, 62.5, 31.2),
    GpuSpec("RTX 4090", r"4090", 1008, 165.2, 165.2, 82.6, 82.6),
    GpuSpec("RTX 4080", r"4080", 716.8, 97.5, 97.5, 48.7, 48.7),
    GpuSpec("RTX 3090", r"3090", 936, 71.0, 71.0, 35.6, 35.6),
    GpuSpec("RTX 3080", r"3080", 760, 59.5, 59.5, 29.8, 29.8),
    GpuSpec("MI355X", r"mi355", 8000, 2500, 2500, 1250, 157.3),
    GpuSpec("MI350X", r"mi350", 8000, 2300, 2300, 1150, 144.2),
    GpuSpec("MI325X", r"mi325", 6000, 1307.4, 1307.4, 653.7, 163.4),
    GpuSpec("MI300X", r"mi300x", 5300, 1307.4, 1307.4, 653.7, 163.4),
)


def detect(device_name: str) -> GpuSpec | None:
    name = device_name.lower()
    for spec in SPECS:
        if re.search(spec.pattern, name):
            return spec
    return None


@dataclass
class Ceilings:
    device_name: str
    bandwidth_gbps: float
    tflops: dict[str, float] = field(default_factory=dict)  # keys bf16, fp16, fp32
    source: str = "spec"  # "measured" | "spec"

    def peak_tflops(self, dtype_name: str) -> float | None:
        return self.tflops.get(dtype_name) or self.tflops.get("fp32")


def spec_ceilings(device_name: str) -> Ceilings | None:
    spec = detect(device_name)
    if spec is None:
        return None
    return Ceilings(device_name, spec.bandwidth_gbps,
                    {"bf16": spec.bf16_tflops, "fp16": spec.fp16_tflops, "fp32": spec.tf32_tflops}, "spec")


def cache_dir() -> Path:
    env = os.environ.get("AUTOKERNEL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "autokernel"


def _cache_file() -> Path:
    return cache_dir() / "ceilings.json"


def _read_cache() -> dict:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def measured_ceilings(device_name: str) -> Ceilings | None:
    entry = _read_cache().get(device_name)
    if not entry:
        return None
    try:
        return Ceilings(device_name, float(entry["bandwidth_gbps"]), {k: float(v) for k, v in entry["tflops"].items()},
                        "measured")
    except (KeyError, TypeError, ValueError):
        return None


def ceilings(device_name: str | None = None) -> Ceilings | None:
    """Measured ceilings if cached for this device, else the spec; None on CPU/unknown."""
    if device_name is None:
        device_name = current_device_name()
    if not device_name or device_name == "cpu":
        return None
    return measured_ceilings(device_name) or spec_ceilings(device_name)


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is present, else ``cpu``; ``cuda[:N]`` only with a GPU.
    Raises ValueError (a user mistake) for a missing GPU or an unknown device."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError("--device cuda asked for, but no CUDA GPU is available (use --device cpu)")
        return device
    if device != "cpu":
        raise ValueError(f"unknown device {device!r}; use auto, cuda or cpu")
    return device


def current_device_name(device: str = "cuda") -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"


# ------------------------------------------------------------------ calibrate
@dataclass
class Calibration:
    device_name: str
    bandwidth_gbps: float
    bf16_tflops: float
    spec_bandwidth_gbps: float | None
    spec_bf16_tflops: float | None
    tflops: dict[str, float]
    seconds: float
    cache_file: str


def _event_times_ms(fn, n: int) -> list[float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def measure_copy_bandwidth(device: str = "cuda", nbytes: int = 1 << 30, calls: int = 20) -> float:
    """GB/s of a device-to-device copy, counting bytes read plus bytes written."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ms = statistics.median(_event_times_ms(lambda: dst.copy_(src), calls))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def measure_matmul_tflops(device: str = "cuda", n: int = 8192, calls: int = 10) -> float:
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    ms = statistics.median(_event_times_ms(lambda: torch.mm(a, b), calls))
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def calibrate(device: str = "cuda") -> Calibration:
    """Measure this GPU's ceilings and cache them (see the module docstring)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("calibrate needs a CUDA GPU")
    t0 = time.perf_counter()
    name = torch.cuda.get_device_name(torch.device(device))
    bandwidth = measure_copy_bandwidth(device)
    bf16 = measure_matmul_tflops(device)
    spec = detect(name)
    scale = bf16 / spec.bf16_tflops if spec else 1.0
    fp32 = spec.tf32_tflops * scale if spec else bf16 / 2
    tflops = {"bf16": bf16, "fp16": bf16, "fp32": fp32}
    cache = _read_cache()
    cache[name] = {"bandwidth_gbps": bandwidth, "tflops": tflops, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                   "torch": torch.__version__}
    path = _cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(cache, indent=2))
    return Calibration(name, bandwidth, bf16, spec.bandwidth_gbps if spec else None, spec.bf16_tflops if spec else None,
                       tflops, time.perf_counter() - t0, str(path))


def calibration_dict(cal: Calibration) -> dict:
    return asdict(cal)


def ramp_gpu_clocks(device: str, seconds: float) -> None:
    """Keep ``device`` busy with matrix products for ``seconds``: an idle H200 sits at 345 MHz
    and needs a few hundred ms of load to reach its clocks, so a kernel timed right after idle
    host work (a compile) runs at a fraction of its speed."""
    import torch

    a = torch.randn(2048, 2048, device=device, dtype=torch.bfloat16)
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize(device)
