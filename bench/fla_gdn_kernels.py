# fla_gdn_kernels.py — fla's chunk_gated_delta_rule forward + backward kernel by kernel (fla as is,
# its source carried in ./fla, never committed), at one shape of fla_inputs.SHAPES (default 3, one
# fla-220m GDN layer), inputs drawn as in fla_gdn_bwd.py. After warm-up (Triton's autotuning) it
# times N fwd+bwd calls under torch.profiler and prints one line per kernel name:
#   FLA_KERNEL <name> calls_per_fwdbwd <c> us_per_call <t> us_per_fwdbwd <c*t>
# then "FLA_KERNEL_TOTAL us_per_fwdbwd <sum>". With --ncu it skips the profiler and runs one more
# fwd+bwd inside the NVTX range "ncu", for `ncu --nvtx --nvtx-include ncu/` to profile only that
# call (not the autotuning launches). --backend as in fla_gdn_bwd.py (fla_inputs.use_backend).
#   python3 bench/fla_gdn_kernels.py [SHAPE_INDEX] [--ncu] [--calls N] [--backend NAME]
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from fla.ops.gated_delta_rule import chunk_gated_delta_rule
from fla_inputs import SHAPES, inputs, positional, use_backend


def main():
    args = sys.argv[1:]
    ncu = "--ncu" in args
    calls = 10
    if "--calls" in args:
        calls = int(args[args.index("--calls") + 1])
    pos = positional(args)
    si = int(pos[0]) if pos else 3
    backend, note = use_backend()
    torch.manual_seed(0)
    B, T, H, K, V = SHAPES[si]
    q, k, v, g, beta = inputs(B, T, H, K, V, "cuda")
    for x in (q, k, v, g, beta):
        x.requires_grad_(True)
    do = torch.randn(B, T, H, V, device="cuda", dtype=torch.bfloat16)
    dht = torch.randn(B, H, K, V, device="cuda", dtype=torch.float32)

    def fwdbwd():
        o, ht = chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
        return torch.autograd.grad((o, ht), (q, k, v, g, beta), (do, dht))

    for _ in range(3):  # autotuning happens here
        fwdbwd()
    torch.cuda.synchronize()
    shape = f"B{B}_T{T}_H{H}_dk{K}_dv{V}"
    if ncu:
        torch.cuda.nvtx.range_push("ncu")
        fwdbwd()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        print(f"fla_gdn_kernels: {shape}: one fwd+bwd inside NVTX range 'ncu'", flush=True)
        return
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fwdbwd()
        torch.cuda.synchronize()
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for e in prof.key_averages():  # kernels are the entries with device time of their own
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = e.self_cuda_time_total
        if t > 0 and e.key not in ("", None):
            tot[e.key] += t  # us
            cnt[e.key] += e.count
    print(f"fla_gdn_kernels: {shape}, {calls} fwd+bwd calls, {torch.cuda.get_device_name()}{note}", flush=True)
    total = 0.0
    for name in sorted(tot, key=lambda n: -tot[n]):
        per_call = tot[name] / cnt[name]
        per_fb = tot[name] / calls
        total += per_fb
        print(f"FLA_KERNEL {name[:90]} calls_per_fwdbwd {cnt[name] / calls:g} us_per_call {per_call:.1f} "
              f"us_per_fwdbwd {per_fb:.1f}")
    print(f"FLA_KERNEL_TOTAL {shape} us_per_fwdbwd {total:.1f} backend {backend}", flush=True)


if __name__ == "__main__":
    main()
