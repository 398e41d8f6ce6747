# fla_gdn_bwd.py — times flash-linear-attention's chunk_gated_delta_rule forward + backward (fla as
# is, its source carried in ./fla, never committed) at the shapes of fla's GDN benchmark (fla_inputs.py), inputs drawn
# as there: bf16, q/k L2-normalised, g = logsigmoid(randn + 3) fp32, beta = sigmoid(rand),
# chunk 64, output_final_state=True, random dO and d(final state). fwd+bwd = one call that runs
# the forward and torch.autograd.grad for q, k, v, g, beta. Median of triton.testing.do_bench,
# twice. Extra peak memory = max_memory_allocated during one fwd+bwd minus what was allocated
# before it (inputs, dO, dht).
# --backend triton (default) | tilelang | flashqla picks fla's path (fla_inputs.use_backend; the
# triton path bypasses fla's Hopper dg guard for timing only).
# Prints "FLA_FWDBWD <shape> ms <m1> <m2> fwd_ms <f> peak_mib <m> backend <name>" lines, each
# after a "FLA_KERNELS <shape> <names>" line naming the kernels one fwd+bwd launched (a fallback
# from FlashQLA or TileLang to fla's Triton kernels shows there); with flashqla also
# "FLA_AGREE <shape> ..." (its outputs and gradients against fla's TileLang path).
#   python3 bench/fla_gdn_bwd.py [SHAPE_INDEX] [--backend NAME]
import torch
import triton
from torch.profiler import ProfilerActivity, profile

from fla.ops.gated_delta_rule import chunk_gated_delta_rule
from fla_inputs import bench_start, inputs, rel_l2, selected_shapes, use_backend


def kernel_names(fn):
    """The distinct names of the GPU kernels one call of FN launches, in launch order."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        if e.device_type.name == "CUDA" and e.name not in names:
            names.append(e.name)
    return names


def against_tilelang(fwdbwd_outputs):
    """FlashQLA's o, ht and gradients against fla's TileLang path on the same inputs, as rel L2
    (the same maths, so bf16 rounding apart: a wrong or fallen-back kernel shows here)."""
    import os
    mine = fwdbwd_outputs()
    os.environ["FLA_FLASH_QLA"] = "0"
    try:
        ref = fwdbwd_outputs()
    finally:
        os.environ["FLA_FLASH_QLA"] = "1"
    names = ("o", "ht", "dq", "dk", "dv", "dg", "dbeta")
    return " ".join(f"{n} {rel_l2(a, b):.2e}" for n, a, b in zip(names, mine, ref))


def main():
    backend, note = use_backend()
    bench_start("fla_gdn_bwd", note)
    dev = "cuda"
    for B, T, H, K, V in selected_shapes():
        q, k, v, g, beta = inputs(B, T, H, K, V, dev)
        for x in (q, k, v, g, beta):
            x.requires_grad_(True)
        do = torch.randn(B, T, H, V, device=dev, dtype=torch.bfloat16)
        dht = torch.randn(B, H, K, V, device=dev, dtype=torch.float32)

        def fwd():
            with torch.no_grad():
                return chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)

        def fwdbwd():
            o, ht = chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
            return torch.autograd.grad((o, ht), (q, k, v, g, beta), (do, dht))

        def fwdbwd_outputs():
            o, ht = chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
            return (o.detach(), ht.detach()) + torch.autograd.grad((o, ht), (q, k, v, g, beta), (do, dht))

        fwdbwd()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        grads = fwdbwd()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        del grads
        fms = triton.testing.do_bench(fwd, warmup=20, rep=200, return_mode="median")
        ms = triton.testing.do_bench(fwdbwd, warmup=20, rep=300, return_mode="median")
        ms2 = triton.testing.do_bench(fwdbwd, warmup=5, rep=300, return_mode="median")
        shape = f"B{B}_T{T}_H{H}_dk{K}_dv{V}"
        print(f"FLA_KERNELS {shape} " + " | ".join(n[:60] for n in kernel_names(fwdbwd)), flush=True)
        print(f"FLA_FWDBWD {shape} ms {ms:.4f} {ms2:.4f} fwd_ms {fms:.4f} peak_mib {peak:.0f} "
              f"backend {backend}", flush=True)
        if backend == "flashqla":
            print(f"FLA_AGREE {shape} flashqla vs fla tilelang rel L2: {against_tilelang(fwdbwd_outputs)}",
                  flush=True)


if __name__ == "__main__":
    main()
