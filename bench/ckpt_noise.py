#!/usr/bin/env python3
"""bench/ckpt_noise.py — is checkpoint CAND as close to REF as precision noise allows?

    python3 bench/ckpt_noise.py [--scale S] [--label TEXT] REF.h5 CAND.h5 FLOOR_A.h5 FLOOR_B.h5

For every tensor of the groups params, adam_m, adam_v: d = ||cand - ref|| / ||ref|| (the
difference under test, e.g. N GPUs x B/N against 1 GPU x B, both bf16) and the noise floor
f = ||floor_a - floor_b|| / ||floor_b|| (e.g. the 1-GPU bf16 run against the same run in fp32:
how far bf16 rounding alone moves that tensor over the same steps). Prints per group the largest
d, the largest f and the largest ratio d / f with its tensor, then one verdict line:
PASS when every tensor's d <= S f (S = 1 by default: the tested change moves no tensor further
than the rounding of the precision does), FAIL otherwise. Exit 0 on PASS, 1 on FAIL, 2 on a bad file.

Why a floor and not a fixed rtol: on random tokens the gradients are mostly noise, so AdamW's m
is a sum of nearly cancelling terms and v's square root divides by it; a rounding difference in
a gradient moves m and v (and, through m / sqrt(v), the updated weights) by far more than one
bf16 unit. The 1-GPU bf16-vs-fp32 pair measures that amplification on the same model, data and
steps; a data-parallel bug (a gradient averaged over B/N instead of B, a missing all-reduce,
other windows) moves tensors by O(1), far above it.
"""
import sys

import h5py
import numpy as np

GROUPS = ("params", "adam_m", "adam_v")


def load(path):
    out = {}
    try:
        with h5py.File(path, "r") as f:
            for g in GROUPS:
                if g not in f:
                    continue
                for name, ds in f[g].items():
                    out[(g, name)] = np.asarray(ds[()], dtype=np.float64).ravel()
    except OSError as e:
        sys.exit(f"error: cannot read checkpoint '{path}': {e}")
    if not out:
        sys.exit(f"error: '{path}' has none of the groups {', '.join(GROUPS)}")
    return out


def rel(a, b):
    nb = np.linalg.norm(b)
    d = np.linalg.norm(a - b)
    return d / nb if nb > 0 else (0.0 if d == 0 else np.inf)


def main(argv):
    label, scale = None, 1.0
    while argv and argv[0] in ("--label", "--scale") and len(argv) > 1:
        if argv[0] == "--label":
            label = argv[1]
        else:
            scale = float(argv[1])
        del argv[:2]
    if len(argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    ref, cand, fa, fb = (load(p) for p in argv)
    keys = sorted(ref)
    missing = [k for k in keys if k not in cand or k not in fa or k not in fb]
    if missing:
        print(f"error: tensors missing from a checkpoint: {missing[:5]}", file=sys.stderr)
        return 2
    worst = {}
    bad = []
    for k in keys:
        if ref[k].shape != cand[k].shape:
            print(f"error: {k[0]}/{k[1]}: shapes differ", file=sys.stderr)
            return 2
        d, f = rel(cand[k], ref[k]), rel(fa[k], fb[k])
        r = d / f if f > 0 else (0.0 if d == 0 else np.inf)
        w = worst.setdefault(k[0], [0.0, 0.0, -1.0, ""])
        w[0], w[1] = max(w[0], d), max(w[1], f)
        if r > w[2]:
            w[2], w[3] = r, k[1]
        if d > scale * f:
            bad.append((r, k, d, f))
    print(f"{label or 'difference'} against the noise floor, per tensor d = ||cand - ref|| / ||ref||, "
          f"f = ||floor_a - floor_b|| / ||floor_b||:")
    for g in GROUPS:
        if g in worst:
            d, f, r, name = worst[g]
            print(f"  {g:7s} max d {d:.3e}  max f {f:.3e}  max d/f {r:.3f} ({name})")
    for r, k, d, f in sorted(bad, reverse=True)[:5]:
        print(f"  beyond {scale:g} x the floor: {k[0]}/{k[1]} d {d:.3e}, f {f:.3e}")
    n = len(keys)
    if bad:
        print(f"FAIL: {len(bad)} of {n} tensors differ more than {scale:g} x the noise floor")
        return 1
    print(f"PASS: all {n} tensors within {scale:g} x the noise floor "
          f"(max d/f {max(w[2] for w in worst.values()):.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
