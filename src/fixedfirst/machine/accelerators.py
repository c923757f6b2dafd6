"""Common accelerators, for planning a run on hardware that is not here (`fixedfirst plan`).

Memory is the total nvidia-smi reports (MiB), which is what torch sees as the device's memory;
the bf16 rate is the datasheet's dense tensor-core peak (no sparsity), the fp32 rate the plain
fp32 peak that torch's default matmul reaches (TF32 is off by default). These are vendors'
numbers, not ours: on a machine with a GPU, `plan` uses the GPU itself instead (its memory as
torch reports it, its peak measured like the trainer's MFU peak: device.measured_peak_flops).
"""

from __future__ import annotations

from dataclasses import dataclass

from fixedfirst.errors import UserError

MIB = 1 << 20


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory: int
    """Bytes."""
    bf16_flops: float
    fp32_flops: float

    def peak_flops(self, bf16: bool) -> float:
        return self.bf16_flops if bf16 else self.fp32_flops


ACCELERATORS: dict[str, Accelerator] = {
    "a100-40gb": Accelerator("NVIDIA A100 40GB (SXM)", 40960 * MIB, 312e12, 19.5e12),
    "a100": Accelerator("NVIDIA A100 80GB", 81920 * MIB, 312e12, 19.5e12),
    "h100": Accelerator("NVIDIA H100 80GB (SXM)", 81559 * MIB, 989e12, 67e12),
    "h100-pcie": Accelerator("NVIDIA H100 80GB (PCIe)", 81559 * MIB, 756e12, 51e12),
    "h200": Accelerator("NVIDIA H200 141GB (SXM)", 143771 * MIB, 989e12, 67e12),
    "l40s": Accelerator("NVIDIA L40S 48GB", 46068 * MIB, 362e12, 91.6e12),
}


def accelerator(kind: str) -> Accelerator:
    """The table's entry for `kind` (case-insensitive), or a one-line error listing the kinds."""
    found = ACCELERATORS.get(kind.lower())
    if found is None:
        raise UserError(
            f"--gpu {kind!r}: not a kind we know; known: {', '.join(ACCELERATORS)} (or give "
            "--gpu-memory GIB and --peak-flops TFLOPS for another)"
        )
    return found


def accelerator_named(device_name: str, memory: int) -> Accelerator | None:
    """The table's entry for a GPU as torch names it ("NVIDIA H200", "NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-40GB", ...) with `memory` bytes; None for a GPU the table does not have."""
    name = device_name.upper()
    if "H200" in name:
        return ACCELERATORS["h200"]
    if "H100" in name:
        return ACCELERATORS["h100-pcie" if "PCIE" in name else "h100"]
    if "A100" in name:
        return ACCELERATORS["a100-40gb" if memory < 60 * 1024 * MIB else "a100"]
    if "L40S" in name:
        return ACCELERATORS["l40s"]
    return None
