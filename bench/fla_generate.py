# fla_generate.py — decode speed of flash-linear-attention's GatedDeltaNetForCausalLM.generate
# (fla as is, its source carried in ./fla, never committed) at configs/fla-220m.ini's model:
# hidden 1024, 12 layers, 4 heads of dk 128, expand_v 2, short conv 4, output gate, SwiGLU 2816,
# vocab 32000, untied embeddings (219.90M parameters), random weights, bf16 (--dtype fp32: fp32).
# For each batch size: a random prompt of --prompt tokens, greedy generation (do_sample=False,
# use_cache=True: fla's recurrent step with its conv and GDN state caches) of exactly --tokens
# new tokens (min_new_tokens = max_new_tokens: no early stop). One untimed warm-up call per
# shape (Triton compilation), then timed: generate(1 new token) (prompt + one step) and
# generate(N new tokens); decode tokens/s = B (N - 1) / (t_N - t_1), the prompt's cost removed,
# as bench/decode_bench.c times only the generated tokens. One JSON line per batch on stdout.
#
#   PYTHONPATH=. python3 bench/fla_generate.py [--batch 1 64] [--prompt 16] [--tokens 256]
import argparse
import json
import sys
import time

import torch

from fla.models import GatedDeltaNetConfig, GatedDeltaNetForCausalLM


def log(msg):
    print(f"fla_generate: {msg}", file=sys.stderr, flush=True)


def timed(model, ids, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         use_cache=True, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fla_generate: no CUDA device")
    dev = torch.device("cuda")
    cfg = GatedDeltaNetConfig(
        attn_mode="chunk", hidden_size=1024, expand_v=2.0, use_gate=True, use_short_conv=True,
        allow_neg_eigval=False, conv_size=4, head_dim=128, num_heads=4, num_v_heads=None,
        max_position_embeddings=a.prompt + a.tokens, hidden_ratio=4, intermediate_size=2816,
        hidden_act="swish", num_hidden_layers=12, norm_eps=1e-6, attn=None, use_cache=True,
        tie_word_embeddings=False, initializer_range=0.02, fuse_norm=True, fuse_swiglu=True,
        fuse_cross_entropy=True, vocab_size=32000)
    torch.manual_seed(0)
    model = GatedDeltaNetForCausalLM(cfg).to(dev)
    if a.dtype == "bf16":
        model = model.to(torch.bfloat16)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {n_params / 1e6:.2f}M "
        f"parameters, {a.dtype}")
    gen = torch.Generator(device=dev)
    gen.manual_seed(7)
    with torch.inference_mode():
        for B in a.batch:
            ids = torch.randint(0, cfg.vocab_size, (B, a.prompt), device=dev, generator=gen)
            timed(model, ids, a.tokens)  # warm-up: compilation, caches
            t1, _ = timed(model, ids, 1)
            tn, out = timed(model, ids, a.tokens)
            new = out.shape[1] - a.prompt
            if new != a.tokens:
                sys.exit(f"fla_generate: generated {new} tokens, asked {a.tokens}")
            dt = tn - t1
            rate = B * (a.tokens - 1) / dt
            log(f"batch {B}: prompt + 1 token {t1:.3f} s, {a.tokens} tokens {tn:.3f} s, "
                f"{rate:.0f} tokens/s")
            print(json.dumps({"bench": "decode", "impl": "fla", "device": torch.cuda.get_device_name(),
                              "precision": a.dtype, "batch": B, "prompt": a.prompt,
                              "tokens": a.tokens, "seconds": round(dt, 4),
                              "tokens_per_s": round(rate, 1),
                              "ms_per_step": round(1e3 * dt / (a.tokens - 1), 4),
                              "first_tokens": out[0, a.prompt:a.prompt + 4].tolist()}), flush=True)


if __name__ == "__main__":
    main()
