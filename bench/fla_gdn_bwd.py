# fla_gdn_bwd.py — times flash-linear-attention's chunk_gated_delta_rule forward + backward (fla as
# is, its source carried in ./fla, never committed) at the shapes of fla's GDN benchmark (fla_inputs.py), inputs drawn
# as there: bf16, q/k L2-normalised, g = logsigmoid(randn + 3) fp32, beta = sigmoid(rand),
# chunk 64, output_final_state=True, random dO and d(final state). fwd+bwd = one call that runs
# the forward and torch.autograd.grad for q, k, v, g, beta. Median of triton.testing.do_bench,
# twice. Extra peak memory = max_memory_allocated during one fwd+bwd minus what was allocated
# before it (inputs, dO, dht).
# fla's backward refuses this Triton on Hopper (its guard in fla/ops/common/chunk_o.py: wrong dg
# for Triton 3.4 to 3.7.0). The guard is bypassed HERE, FOR TIMING ONLY: fla's gradients under
# this Triton are not trusted and not compared with anything.
# Prints "FLA_FWDBWD <shape> ms <m1> <m2> fwd_ms <f> peak_mib <m>" lines.
import torch
import triton

import fla.ops.common.chunk_o as fla_chunk_o
from fla.ops.gated_delta_rule import chunk_gated_delta_rule
from fla_inputs import bench_start, inputs, selected_shapes


def main():
    fla_chunk_o.TRITON_ABOVE_3_7_1 = True  # guard bypass, timing only (see the header)
    bench_start("fla_gdn_bwd", " (Hopper dg guard bypassed for timing)")
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
        print(f"FLA_FWDBWD B{B}_T{T}_H{H}_dk{K}_dv{V} ms {ms:.4f} {ms2:.4f} fwd_ms {fms:.4f} "
              f"peak_mib {peak:.0f}", flush=True)


if __name__ == "__main__":
    main()
