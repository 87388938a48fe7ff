"""Where a model runs and in which precision: one decision, used by training and evaluation.

`placement(requested, precision, cuda=…, bf16=…)` is pure (the machine's capabilities are passed
in, so it is tested on a CPU); `detect()` reads them from torch. The rule:

- device: "cpu" forces the CPU; "cuda" demands a GPU (one sentence when there is none); "auto"
  takes the GPU when there is one.
- dtype (the weights'): on a GPU, bfloat16 when the profile asks for "bf16" or "auto" and the GPU
  supports it (Ampere and later: `torch.cuda.is_bf16_supported()`), else float32 (fp16 is never
  chosen: the recipe's learning rates are set for bf16/fp32 ranges). On a CPU always float32.
- compute (`compute_dtype`): on a CPU whose cores have bfloat16 units (AVX512-BF16 or AMX,
  `cpu_bf16`), a profile that asks for "bf16" computes its matmuls in bfloat16 under
  `torch.autocast` while weights, LoRA adapters and optimizer state stay float32 (mixed
  precision with fp32 master weights), faster than fp32 on such parts (docs/results/training.md).
  "auto" stays float32 on a CPU: most
  x86 parts have no bf16 units, where bf16 is slower than fp32.
"""
from __future__ import annotations

from base.errors import UserError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "bf16", "fp32")


def placement(requested: str = "auto", precision: str = "auto", *, cuda: bool, bf16: bool) -> tuple[str, str]:
    """(device, dtype name) for a requested device and precision on a machine that has (`cuda`)
    a GPU that supports (`bf16`) bfloat16."""
    if requested not in DEVICES:
        raise UserError(f"unknown device {requested!r} (one of {', '.join(DEVICES)})")
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    if requested == "cuda" and not cuda:
        raise UserError("device cuda was asked for but no CUDA GPU is visible here (use --device auto or cpu)")
    device = "cuda" if cuda and requested != "cpu" else "cpu"
    if device == "cuda" and precision != "fp32" and bf16:
        return device, "bfloat16"
    return device, "float32"


def compute_dtype(device: str, dtype: str, precision: str, *, cpu_bf16: bool) -> str:
    """The dtype matmuls run in: the weights' dtype, except bfloat16 under autocast on a CPU with
    bf16 units when the profile asks for "bf16" (`placement` keeps the weights float32 there)."""
    if device == "cpu" and precision == "bf16" and cpu_bf16:
        return "bfloat16"
    return dtype


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 matmul units (AVX512-BF16 or AMX), as oneDNN sees them."""
    import torch

    try:
        avx512_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported() and torch.cpu._is_avx512_bf16_supported()
        return bool(avx512_bf16 or torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


def detect() -> dict:
    """This machine's capabilities, as `placement` takes them."""
    import torch

    cuda = torch.cuda.is_available()
    return {"cuda": cuda, "bf16": bool(cuda and torch.cuda.is_bf16_supported())}


def choose(requested: str = "auto", precision: str = "auto") -> tuple[str, str]:
    """`placement` on this machine."""
    return placement(requested, precision, **detect())


def choose_compute(requested: str = "auto", precision: str = "auto") -> tuple[str, str, str]:
    """(device, weights dtype, compute dtype) on this machine."""
    device, dtype = choose(requested, precision)
    return device, dtype, compute_dtype(device, dtype, precision, cpu_bf16=device == "cpu" and cpu_has_bf16())


ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags that decide how a training's matmuls run here (bf16 emulated, or on bf16 units)."""


def machine(precision: str = "auto") -> dict:
    """What a measurement's raw result names of the machine it ran on: the CPU (or GPU) model, its cores,
    the ISA flags that decide the kernels, whether bf16 units are there, and the dtypes a profile of
    `precision` trains in here (the same default scores differently on different CPUs)."""
    import os

    import torch

    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        pass
    device, dtype, compute = choose_compute("auto", precision)
    return {"device": device_name(device), "cpu": device_name("cpu"), "cores": len(os.sched_getaffinity(0)),
            "isa": [f for f in ISA_FLAGS if f in flags], "bf16_units": cpu_has_bf16(), "precision": precision,
            "weights_dtype": dtype, "compute_dtype": compute, "torch": torch.__version__}


def device_name(device: str) -> str:
    """The accelerator's marketing name ("NVIDIA H100 80GB HBM3") or the CPU model."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()
