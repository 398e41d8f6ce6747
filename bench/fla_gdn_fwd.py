# fla_gdn_fwd.py — times flash-linear-attention's chunk_gated_delta_rule forward (fla as is,
# its source carried in ./fla, never committed) at the shapes of fla's GDN benchmark (fla_inputs.py), inputs drawn as
# there: bf16, q/k L2-normalised, g = logsigmoid(randn + 3) fp32, beta = sigmoid(rand), chunk 64,
# output_final_state=True. Median of triton.testing.do_bench. Forward only, under no_grad (fla's
# Hopper guard concerns the backward and is not touched). Prints "FLA <shape> <ms>" lines.
import torch
import triton

from fla.ops.gated_delta_rule import chunk_gated_delta_rule
from fla_inputs import bench_start, inputs, selected_shapes


def main():
    bench_start("fla_gdn_fwd")
    dev = "cuda"
    for B, T, H, K, V in selected_shapes():
        q, k, v, g, beta = inputs(B, T, H, K, V, dev)

        def fwd():
            return chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)

        with torch.no_grad():
            fwd()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(fwd, warmup=50, rep=300, return_mode="median")
            ms2 = triton.testing.do_bench(fwd, warmup=10, rep=300, return_mode="median")
        print(f"FLA B{B}_T{T}_H{H}_dk{K}_dv{V} ms {ms:.4f} {ms2:.4f}", flush=True)


if __name__ == "__main__":
    main()
