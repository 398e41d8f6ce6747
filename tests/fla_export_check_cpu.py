# tests/fla_export_check_cpu.py — tests/gpu/fla_export_check.py on the CPU: checks the export's
# mapping and config against fla's model definition (not fla's GPU kernels).
# fla's GatedDeltaNetForCausalLM runs on the CPU with each Triton-backed op replaced (monkeypatched,
# here only; fla's source untouched) by tests/fla_refs.py's plain torch code of the same maths,
# and flash_attn_func by torch SDPA with keys t - window < j <= t.
# Needs triton <= 3.8 only so that fla imports (3.9 rejects an autotune key in fla/ops/cp).
#   PYTHONPATH=<dir holding fla/> python3 tests/fla_export_check_cpu.py --bin BUILD --work DIR \
#       [--patterns G GGGS GSGA] [--layers]      (BUILD: gdn-train, gdn-prepare, gdn-export)
import argparse
import os
import random
import subprocess
import sys

import numpy as np
import torch

torch.set_num_threads(os.cpu_count())

import fla  # noqa: E402
import fla.layers.attn as fla_attn  # noqa: E402

CONFIG = """[model]
pattern = {pattern}
n_layers = 4
d_model = 256
mlp_hidden = 512
tie_embeddings = false
[gdn]
n_heads = 2
head_dim = 64
expand_v = 2
conv_size = 4
[swa]
n_heads = 4
head_dim = 64
window = 64
[data]
path = {data}
seq_len = 128
[train]
device = cpu
batch_size = 4
steps = {steps}
eval_every = 0
eval_batches = 1
out_dir = {out}
seed = 5
[optim]
lr = 1e-2
min_lr = 1e-3
warmup_steps = 2
weight_decay = 0
[log]
every = 10
"""
B, T = 4, 512


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_refs  # noqa: E402  (tests/: the torch references of fla's Triton ops)

fla_refs.use(fla_refs.ALL)
fla_attn.flash_attn_func = fla_refs.sdpa_window


# ---------------------------------------------------------------- the check
def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(r.stdout[-600:])
    if r.returncode != 0:
        sys.stdout.write(r.stderr[-4000:])
        sys.exit(f"FAIL ({cmd[0]} exit {r.returncode})")


def rel_l2(a, ref):
    a, ref = np.asarray(a, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--patterns", nargs="+", default=["G", "GGGS"])
    ap.add_argument("--no-b", action="store_true")
    a = ap.parse_args()
    from fla.models import GatedDeltaNetConfig, GatedDeltaNetForCausalLM
    from transformers import AutoModelForCausalLM
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, fla {fla.__version__}, CPU",
          flush=True)
    w = os.path.abspath(a.work)
    os.makedirs(w, exist_ok=True)
    b = os.path.abspath(a.bin)
    rng = random.Random(a.seed)
    words = ["the", "gated", "delta", "rule", "state", "decays", "and", "writes", "keys", "values",
             "of", "a", "model", "learns", "text", "slowly", "while", "attention", "looks", "back"]
    if not os.path.exists(f"{w}/data.h5"):
        with open(f"{w}/text.txt", "w") as f:
            for _ in range(4000):
                f.write(" ".join(rng.choice(words) for _ in range(12)) + ".\n")
        run([f"{b}/gdn-prepare", "--input", f"{w}/text.txt", "--out", f"{w}/data.h5"])
    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, 256, (B, T), generator=g, dtype=torch.int64)
    ids.numpy().astype("<i4").tofile(f"{w}/tokens.bin")

    def ours(src):
        out = f"{src}.logits.bin"
        run([f"{b}/gdn-export", "--dump-logits", src, f"{w}/tokens.bin", out, "--batch", str(B)])
        return np.fromfile(out, dtype="<f8").reshape(B, T, -1)

    def fla_logits(model):
        model.eval()
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False).logits.double().numpy()

    results = []
    for pat in a.patterns:
        d = f"{w}/{pat}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/run.ini", "w") as f:
            f.write(CONFIG.format(pattern=pat, data=f"{w}/data.h5", out=f"{d}/run", steps=a.steps))
        run([f"{b}/gdn-train", f"{d}/run.ini", "--set", "train.overwrite=true"])
        run([f"{b}/gdn-export", f"{d}/run/checkpoint.h5", f"{d}/hf32", "--dtype", "fp32"])
        m, info = AutoModelForCausalLM.from_pretrained(f"{d}/hf32", dtype=torch.float32,
                                                       output_loading_info=True)
        print(f"[{pat}] loaded {type(m).__name__}; loading info: {info}", flush=True)
        print(f"[{pat}] layers: " + ", ".join(type(layer.attn).__name__ for layer in m.model.layers))
        r = rel_l2(fla_logits(m), ours(f"{d}/hf32"))
        results.append((f"A export pattern {pat} fp32", r, info))
        print(f"[{pat}] A: rel L2 fla(CPU fp32) vs gdn.c float64 = {r:.3e}", flush=True)
        if a.no_b:
            continue
        cfg = GatedDeltaNetConfig.from_pretrained(f"{d}/hf32")
        torch.manual_seed(a.seed + 1)
        m = GatedDeltaNetForCausalLM(cfg).float()
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("A_log"):
                    p.copy_(torch.log(torch.empty_like(p).uniform_(1, 16)))
                elif name.endswith("dt_bias"):
                    p.copy_(torch.empty_like(p).uniform_(-4, 0))
                elif p.dim() == 1:
                    p.copy_(1 + 0.3 * torch.randn_like(p))
                else:
                    p.normal_(0, 0.3 / p.shape[-1] ** 0.5)
        # transformers 5 reads _tied_weights_keys as a dict {target: source}; fla declares the v4 list
        # ["lm_head.weight"] and save_pretrained raises on it. Same meaning in v5 form (untied here, so
        # nothing is dropped: only tensors sharing storage are):
        m._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
        m.save_pretrained(f"{d}/fla_random", safe_serialization=True)
        r = rel_l2(fla_logits(m), ours(f"{d}/fla_random"))
        results.append((f"B import pattern {pat} fla_random", r, None))
        print(f"[{pat}] B: rel L2 fla(CPU fp32) vs gdn.c float64 import = {r:.3e}", flush=True)
        # also gdn-train --init-from the fla directory (the import path of a run), 1 step, to show it loads
        run([f"{b}/gdn-train", f"{d}/run.ini", "--init-from", f"{d}/fla_random", "--set", "train.overwrite=true",
             "--set", "train.steps=1", "--set", f"train.out_dir={d}/run_init"])
    print("\nsummary")
    for what, r, info in results:
        print(f"{'ok  ' if r <= 1e-4 else 'FAIL'}  {what}: rel L2 {r:.3e}"
              + (f"  missing={info['missing_keys']} unexpected={info['unexpected_keys']} "
                 f"mismatched={info['mismatched_keys']} errors={info['error_msgs']}" if info else ""))


if __name__ == "__main__":
    main()
