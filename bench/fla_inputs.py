# fla_inputs.py — the shapes and inputs of fla's GDN benchmark that fla_gdn_fwd.py and fla_gdn_bwd.py
# time fla on (bf16 q, k L2-normalised; v ~ N(0,1); g = logsigmoid(N(0,1) + 3) and
# beta = sigmoid(U(0,1)) in fp32), drawn in this order from torch's generator; and the choice of
# fla's GDN backend (use_backend).
import os
import sys

import torch
import torch.nn.functional as F
import triton

# fla's benchmark's three kernel shapes, then one GDN layer of configs/fla-220m.ini
SHAPES = [(8, 4096, 16, 128, 128), (4, 4096, 16, 128, 256), (1, 32768, 16, 128, 128), (16, 2048, 4, 128, 256)]


def bench_start(name, note=""):
    """Seeds torch's generator with 0 and prints the line NAME: device, torch, triton[NOTE]."""
    torch.manual_seed(0)
    print(f"{name}: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}{note}", flush=True)


def selected_shapes(argv=None):
    """SHAPES, or only SHAPES[N] when the command line's first positional argument is N."""
    pos = positional((argv or sys.argv)[1:])
    only = int(pos[0]) if pos else -1
    return [s for i, s in enumerate(SHAPES) if only < 0 or i == only]


def positional(args, valued=("--backend", "--calls")):
    """The arguments that are neither options nor the values of the options in VALUED."""
    return [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] not in valued)]


BACKENDS = ("triton", "tilelang", "flashqla")


def use_backend(argv=None):
    """Selects fla's GDN path from the command line's "--backend NAME" (default triton) through
    fla's own dispatch switches, and returns (NAME, a note for the header line):
      triton    fla's Triton kernels only (FLA_TILELANG=0, FLA_FLASH_QLA=0). fla refuses its gated
                dq/dk/dw/dg kernel under Triton 3.4-3.7.0 on Hopper (wrong dg); the guard is
                bypassed HERE, FOR TIMING ONLY: those gradients are not trusted.
      tilelang  fla's shipped Hopper path: Triton kernels with the TileLang dq/dk/dw/dg kernel
                (FLA_TILELANG=1, FLA_FLASH_QLA=0); needs the tilelang package.
      flashqla  FlashQLA's fused TileLang kernels through fla's backend (FLA_FLASH_QLA=1); needs
                the flash_qla and tilelang packages, dk = dv = 128 only (else fla falls back)."""
    args = (argv or sys.argv)[1:]
    name = args[args.index("--backend") + 1] if "--backend" in args else "triton"
    if name not in BACKENDS:
        sys.exit(f"--backend {name}: not one of {', '.join(BACKENDS)}")
    os.environ["FLA_TILELANG"] = "0" if name == "triton" else "1"
    os.environ["FLA_FLASH_QLA"] = "1" if name == "flashqla" else "0"
    if name == "triton":
        import fla.ops.common.chunk_o as fla_chunk_o
        fla_chunk_o.TRITON_ABOVE_3_7_1 = True  # guard bypass, timing only (see above)
        return name, " (backend triton; Hopper dg guard bypassed for timing)"
    import tilelang
    note = f" (backend {name}; tilelang {tilelang.__version__}"
    if name == "flashqla":
        import flash_qla
        note += f", flash_qla {flash_qla.__version__}"
    return name, note + ")"


def rel_l2(a, b):
    """|a - b| / |b| in float64 (0 when both are zero, inf when only b is)."""
    a, b = a.double(), b.double()
    num, den = (a - b).norm().item(), b.norm().item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def inputs(B, T, H, K, V, dev="cuda"):
    q = F.normalize(torch.randn(B, T, H, K, device=dev, dtype=torch.float32), p=2, dim=-1).bfloat16()
    k = F.normalize(torch.randn(B, T, H, K, device=dev, dtype=torch.float32), p=2, dim=-1).bfloat16()
    v = torch.randn(B, T, H, V, device=dev, dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32) + 3)
    beta = torch.rand(B, T, H, device=dev, dtype=torch.float32).sigmoid()
    return q, k, v, g, beta
