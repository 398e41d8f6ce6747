# fla_gdn_varlen.py — times flash-linear-attention's chunk_gated_delta_rule forward + backward (fla
# as is, its source carried in ./fla, never committed) on packed documents through its varlen
# path, at one fla-220m GDN layer's tokens (B16 T2048 H4 dk128 dv256), next to gdn_docs_bench.cu:
#   python3 bench/fla_gdn_varlen.py [--backend NAME] RUN...   in one process, one line each, RUN being
#     none                   rows of (B, T), no cu_seqlens
#     VARIANT=CU_SEQLENS     inputs (1, B*T, H, D) and cu_seqlens read from the file
#                            gdn_docs_bench --docs-out wrote (int32 little-endian boundaries over
#                            the flattened B*T tokens, row starts included), as a LongTensor
# Inputs drawn as fla_inputs.py draws them (bf16, q/k L2-normalised, g = logsigmoid(randn + 3)
# fp32, beta = sigmoid(rand)) at (B, T) and flattened; chunk 64; no initial state, no final state
# (as the model runs the layer); dO ~ N(0,1). fwd+bwd = one call that runs the forward and
# torch.autograd.grad for q, k, v, g, beta. fla builds its chunk indices from cu_seqlens inside
# the call (cached on the tensor, as in a training step that reuses it). Median of
# triton.testing.do_bench, twice.
# --backend triton (default) | tilelang picks fla's path (fla_inputs.use_backend; the triton path
# bypasses fla's Hopper dg guard for timing only; FlashQLA does not run at dv 256).
# Prints "FLA_DOCS <variant> fwdbwd_ms <m1> <m2> fwd_ms <f> docs <n>".
import struct
import sys

import torch
import triton

from fla.ops.gated_delta_rule import chunk_gated_delta_rule
from fla_inputs import SHAPES, bench_start, inputs, positional, use_backend


def read_cu_seqlens(path, n_tokens):
    """The int32 little-endian boundaries in path, checked: 0 first, n_tokens last, increasing."""
    with open(path, "rb") as fp:
        raw = fp.read()
    n = len(raw) // 4
    bounds = list(struct.unpack(f"<{n}i", raw[:4 * n]))
    if (len(raw) % 4 or n < 2 or bounds[0] != 0 or bounds[-1] != n_tokens
            or any(b <= a for a, b in zip(bounds, bounds[1:]))):
        sys.exit(f"fla_gdn_varlen: {path}: not cu_seqlens over {n_tokens} tokens "
                 "(int32 little-endian, 0 first, the token count last, increasing)")
    return bounds


def time_run(variant, path, dev):
    B, T, H, K, V = SHAPES[3]
    q, k, v, g, beta = inputs(B, T, H, K, V, dev)
    cu = None
    ndocs = B
    if path is not None:
        bounds = read_cu_seqlens(path, B * T)
        cu = torch.tensor(bounds, dtype=torch.long, device=dev)
        ndocs = len(bounds) - 1
        q, k, v, g, beta = (x.reshape(1, B * T, *x.shape[2:]).contiguous() for x in (q, k, v, g, beta))
    for x in (q, k, v, g, beta):
        x.requires_grad_(True)
    do = torch.randn(*v.shape, device=dev, dtype=torch.bfloat16)

    def call():
        if cu is None:
            return chunk_gated_delta_rule(q, k, v, g, beta)
        return chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)

    def fwd():
        with torch.no_grad():
            return call()

    def fwdbwd():
        o, _ = call()
        return torch.autograd.grad(o, (q, k, v, g, beta), do)

    fwdbwd()
    torch.cuda.synchronize()
    fms = triton.testing.do_bench(fwd, warmup=20, rep=200, return_mode="median")
    ms = triton.testing.do_bench(fwdbwd, warmup=20, rep=300, return_mode="median")
    ms2 = triton.testing.do_bench(fwdbwd, warmup=5, rep=300, return_mode="median")
    print(f"FLA_DOCS {variant} fwdbwd_ms {ms:.4f} {ms2:.4f} fwd_ms {fms:.4f} docs {ndocs}", flush=True)


def main():
    runs = []
    for arg in positional(sys.argv[1:]):
        variant, _, path = arg.partition("=")
        if not variant or (arg != "none" and not path):
            sys.exit(f"fla_gdn_varlen: {arg}: expected none or VARIANT=CU_SEQLENS_FILE")
        runs.append((variant, path or None))
    if not runs:
        sys.exit("usage: fla_gdn_varlen.py [--backend NAME] none | VARIANT=CU_SEQLENS_FILE ...")
    backend, note = use_backend()
    bench_start("fla_gdn_varlen", note)
    for variant, path in runs:
        time_run(variant, path, "cuda")


if __name__ == "__main__":
    main()
