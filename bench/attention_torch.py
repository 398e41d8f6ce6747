# attention_torch.py — PyTorch's attention on the shapes of bench/attention_bench.cu, timed the
# same way (CUDA events, 3 warm-ups, median of 25, two input sets alternated), in the same
# device call. Layout (B,T,H,D) as ours, handed to PyTorch as the (B,H,T,D) transposed view.
#   full:   scaled_dot_product_attention(is_causal=True), flash backend forced
#   window: window 2048 at T 16384 through (a) SDPA with an explicit boolean window mask
#           (PyTorch picks the backend; flash takes no mask) and (b) flex_attention with a
#           sliding-window block mask under torch.compile (compile time printed, not timed).
# With the output of attention_bench (argument 1) it prints the comparison table, one row per
# case, PyTorch path and our backward mode (det: deterministic two passes; nondet: dq by atomics).
import os
import re
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = "cuda"
torch.manual_seed(0)


def timed(fn, warm=3, reps=25):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for r in range(warm + reps):
        e0.record()
        fn(r & 1)
        e1.record()
        e1.synchronize()
        if r >= warm:
            ts.append(e0.elapsed_time(e1))
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def make_sets(B, T, H, D):
    sets = []
    for _ in range(2):
        q, k, v, do = (torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
        sets.append([x.requires_grad_(True) for x in (q, k, v)] + [do])
    return sets


def bench(name, attn, B, T, H, D):
    sets = make_sets(B, T, H, D)

    def fwd(i):
        q, k, v, _ = sets[i]
        with torch.no_grad():
            attn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))

    def fwdbwd(i):
        q, k, v, do = sets[i]
        o = attn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        torch.autograd.grad(o, (q, k, v), do.transpose(1, 2))

    out = {}
    for mode, fn in (("fwd", fwd), ("fwd+bwd", fwdbwd)):
        runs = [timed(fn) for _ in range(2)]
        for j, (med, lo, hi) in enumerate(runs):
            print(f"  {name:28s} {mode:8s} run {j}: median {med:.3f} ms  (min {lo:.3f}, max {hi:.3f})", flush=True)
        out[mode] = min(r[0] for r in runs)
    del sets
    torch.cuda.empty_cache()
    return out


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
    res = {}
    B, T, H, D = 8, 4096, 16, 128

    def flash_causal(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    res["full"] = ("sdpa flash is_causal", bench("full/sdpa-flash", flash_causal, B, T, H, D))

    B, T, H, D, W = 2, 16384, 16, 128, 2048
    i = torch.arange(T, device=dev)
    mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - W)  # (T, T), True = visible

    def sdpa_masked(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    res["window-mask"] = ("sdpa explicit mask", bench("window/sdpa-mask", sdpa_masked, B, T, H, D))
    del mask
    torch.cuda.empty_cache()

    if os.environ.get("ATTN_SKIP_FLEX") != "1":
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            def swa(b, h, qi, kj):
                return (kj <= qi) & (kj > qi - W)

            bm = create_block_mask(swa, None, None, T, T, device=dev)
            flex = torch.compile(flex_attention)
            t0 = time.time()
            qq = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
            qt = qq.transpose(1, 2)  # the strides the timed calls use: no recompile there
            flex(qt, qt, qt, block_mask=bm).sum().backward()
            torch.cuda.synchronize()
            print(f"  flex_attention compile + first fwd/bwd: {time.time() - t0:.1f} s", flush=True)
            del qq
            res["window-flex"] = ("flex_attention block mask",
                                  bench("window/flex", lambda q, k, v: flex(q, k, v, block_mask=bm), B, T, H, D))
        except Exception as e:  # report and go on: the other numbers stand
            print(f"  flex_attention failed: {type(e).__name__}: {e}", flush=True)

    ours = {}  # (case, mode) -> (fwd ms, fwd+bwd ms)
    if len(sys.argv) > 1 and os.path.exists(sys.argv[1]):
        for line in open(sys.argv[1]):
            m = re.match(r"RESULT (\S+) (det|nondet) .* fwd_ms (\S+) fwdbwd_ms (\S+)", line)
            if m:
                ours[(m.group(1), m.group(2))] = (float(m.group(3)), float(m.group(4)))
    print("\n| case | PyTorch path | our bwd mode | ours fwd ms | torch fwd ms | ratio | ours fwd+bwd ms | "
          "torch fwd+bwd ms | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, (path, t) in res.items():
        case = key.split("-")[0]
        for mode in ("det", "nondet"):
            if (case, mode) in ours:
                of, ob = ours[(case, mode)]
                print(f"| {case} | {path} | {mode} | {of:.3f} | {t['fwd']:.3f} | {of / t['fwd']:.2f} | {ob:.3f} | "
                      f"{t['fwd+bwd']:.3f} | {ob / t['fwd+bwd']:.2f} |")
            else:
                print(f"| {case} | {path} | {mode} | - | {t['fwd']:.3f} | - | - | {t['fwd+bwd']:.3f} | - |")


if __name__ == "__main__":
    main()
