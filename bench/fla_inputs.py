# fla_inputs.py — the shapes and inputs of fla's GDN benchmark that fla_gdn_fwd.py and fla_gdn_bwd.py
# time fla on (bf16 q, k L2-normalised; v ~ N(0,1); g = logsigmoid(N(0,1) + 3) and
# beta = sigmoid(U(0,1)) in fp32), drawn in this order from torch's generator.
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


def selected_shapes(argv=sys.argv):
    """SHAPES, or only SHAPES[N] when the command line's first argument is N."""
    only = int(argv[1]) if len(argv) > 1 else -1
    return [s for i, s in enumerate(SHAPES) if only < 0 or i == only]


def inputs(B, T, H, K, V, dev="cuda"):
    q = F.normalize(torch.randn(B, T, H, K, device=dev, dtype=torch.float32), p=2, dim=-1).bfloat16()
    k = F.normalize(torch.randn(B, T, H, K, device=dev, dtype=torch.float32), p=2, dim=-1).bfloat16()
    v = torch.randn(B, T, H, V, device=dev, dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32) + 3)
    beta = torch.rand(B, T, H, device=dev, dtype=torch.float32).sigmoid()
    return q, k, v, g, beta
