"""GPU presets for `zerolab fit --gpu NAME`: memory, dense 16-bit tensor FLOPs, and the links a GPU talks over.

Every figure is the vendor's data sheet, read as printed: memory in GB (10^9 bytes; the device shows a little more,
so this is on the safe side), dense BF16 tensor-core FLOP/s (without the 2:4 sparsity that data sheets print next to
it), and link rates per direction (a data sheet's "900 GB/s" NVLink is both directions added: 450 each way; PCIe
x16 is 31.5 GB/s per direction at Gen4 and 63 at Gen5, zerolab.engine.comm.BANDWIDTHS). ``nvlink`` is None where GPUs of
a node talk over PCIe only.
"""
from dataclasses import dataclass

from zerolab.engine import comm


@dataclass(frozen=True)
class GPU:
    name: str
    memory: int  # bytes
    bf16_flops: float  # dense BF16 tensor-core FLOP/s
    nvlink: float | None  # bytes/s per direction to the other GPUs of the node
    pcie: float  # bytes/s per direction to the host
    source: str

    @property
    def intra_node(self):
        """The link collectives inside a node use: NVLink, or PCIe where there is none."""
        return self.nvlink or self.pcie

    def as_dict(self):
        return {"name": self.name, "memory": self.memory, "bf16_flops": self.bf16_flops, "nvlink": self.nvlink,
                "pcie": self.pcie, "source": self.source}


PCIE4, PCIE5 = comm.BANDWIDTHS["pcie4"], comm.BANDWIDTHS["pcie5"]

PRESETS = {gpu.name: gpu for gpu in (
    # NVIDIA A100 Tensor Core GPU data sheet (2021), SXM column: 40GB HBM2 / 80GB HBM2e, BF16 Tensor Core 312 TFLOPS
    # (624 with sparsity), NVLink 600 GB/s, PCIe Gen4 64 GB/s.
    GPU("a100-40gb", 40 * 10**9, 312e12, 300e9, PCIE4, "NVIDIA A100 data sheet, SXM"),
    GPU("a100-80gb", 80 * 10**9, 312e12, 300e9, PCIE4, "NVIDIA A100 data sheet, SXM"),
    # NVIDIA H100 Tensor Core GPU data sheet, H100 SXM column: 80GB, BF16 Tensor Core 1,979 TFLOPS with sparsity
    # (989 dense), NVLink 900 GB/s, PCIe Gen5 128 GB/s. H100 PCIe (80GB) column: BF16 1,513 TFLOPS with sparsity
    # (756 dense), PCIe Gen5 128 GB/s; its NVLink bridge joins pairs only, so a ring over 4 or 8 crosses PCIe.
    GPU("h100-80gb", 80 * 10**9, 989e12, 450e9, PCIE5, "NVIDIA H100 data sheet, SXM"),
    GPU("h100-pcie", 80 * 10**9, 756e12, None, PCIE5, "NVIDIA H100 data sheet, PCIe"),
    # NVIDIA H200 Tensor Core GPU data sheet, H200 SXM column: 141GB HBM3e, BF16 Tensor Core 1,979 TFLOPS with
    # sparsity (989 dense), NVLink 900 GB/s, PCIe Gen5 128 GB/s.
    GPU("h200", 141 * 10**9, 989e12, 450e9, PCIE5, "NVIDIA H200 data sheet, SXM"),
    # NVIDIA L40S data sheet: 48GB GDDR6, BF16 Tensor Core 362.05 TFLOPS (733 with sparsity), PCIe Gen4 x16
    # 64 GB/s bidirectional, no NVLink.
    GPU("l40s", 48 * 10**9, 362.05e12, None, PCIE4, "NVIDIA L40S data sheet"),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: 24GB GDDR6X, peak BF16 Tensor TFLOPS with FP32
    # accumulate 165.2 (330.4 with sparsity; what torch's bf16 matmuls use), PCIe Gen4, no NVLink.
    GPU("4090", 24 * 10**9, 165.2e12, None, PCIE4, "NVIDIA Ada architecture whitepaper, RTX 4090"),
)}
DEFAULT_FOR_TIME = "h100-80gb"  # the speeds assumed when only --gpu-memory is given


def preset(name):
    """A GPU preset by name ('h100-80gb', ...); ValueError naming the choices otherwise."""
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise ValueError(f"unknown GPU {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[key]
