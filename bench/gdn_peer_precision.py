# gdn_peer_precision.py — the accuracy of fla's and FlashQLA's GDN backward on the inputs our
# GPU test holds our kernels to (tests/gpu/test_gdn_bwd.cu): q, k L2-normalised rows, v, dO ~
# N(0,1), per-head gate regimes "mixed" (-g log-uniform in [1e-4, 20]), "weak" (-g in [0, 0.02])
# and "strong" (-g in [5, 20]), beta in (0, 1), near 0 or near 1, optional h0 and d(final state);
# dk = dv = 128 (FlashQLA's only size), bf16 q, k, v, fp32 g, beta. Reference: the token
# recurrence in float64 (DESIGN.md 3.1) on the same bf16-rounded inputs, differentiated by
# torch.autograd. Reported per case and backend: relative L2 of o, dq, dk, dv, dg, dbeta, dh0,
# and the worst (b, h) slice of dg and dbeta, against test_gdn_bwd's bf16 bound (1e-2). This
# measures what the precision question needs: whether a single-plane design passes
# the bound our kernels are held to.
#   python3 bench/gdn_peer_precision.py [--backend triton|tilelang|flashqla] [--seed N] [--case NAME]
# (--case: that case alone, for one process a case: each new shape compiles fla's and
# TileLang's kernels again, a minute or more a case)
# Prints "PEER_PREC <case> <backend> o .. dq .. ... dg_head .. dbeta_head .. pass|FAIL" lines and
# "PEER_PREC_SUMMARY <backend> <passed>/<cases> worst dg_head <e>".
import math
import sys

import torch

from fla_inputs import rel_l2, use_backend

BOUND = 1e-2
D = 128


def draw(B, T, H, regimes, beta_mode, h0, dht, gen):
    """Inputs as test_gdn_bwd draws them, on the CPU; regimes: 'mixed' or 'mws' (head h gets mixed
    / weak / strong by h % 3). q, k, v rounded to bf16 (the reference reads the rounded values)."""
    def normal(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def uniform(*shape):
        return torch.rand(*shape, generator=gen, dtype=torch.float64)
    q = torch.nn.functional.normalize(normal(B, T, H, D), dim=-1).bfloat16()
    k = torch.nn.functional.normalize(normal(B, T, H, D), dim=-1).bfloat16()
    v = normal(B, T, H, D).bfloat16()
    do = normal(B, T, H, D).bfloat16()
    u = uniform(B, T, H)
    mixed = -torch.exp(math.log(1e-4) + (math.log(20.0) - math.log(1e-4)) * u)
    if regimes == "mws":
        reg = torch.arange(H) % 3
        g = torch.where(reg == 0, mixed, torch.where(reg == 1, -0.02 * u, -(5.0 + 15.0 * u)))
    else:
        g = mixed
    w = uniform(B, T, H)
    beta = {"low": 0.05 * w, "high": 0.95 + 0.05 * w}.get(beta_mode, w)
    s0 = 0.5 * normal(B, H, D, D) if h0 else None
    dst = normal(B, H, D, D) if dht else None
    return (q, k, v, g.float(), beta.float(), do, s0, dst)


def reference(q, k, v, g, beta, do, s0, dst, scale):
    """o, final state and the float64 gradients of the token recurrence:
    S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T, o_t = scale S_t^T q_t."""
    f = [x.double().detach().requires_grad_(True) for x in (q, k, v, g, beta)]
    qq, kk, vv, gg, bb = f
    B, T, H, _ = qq.shape
    S = s0.double().clone().requires_grad_(True) if s0 is not None else torch.zeros(
        B, H, D, D, dtype=torch.float64, device=q.device)
    S_init = S
    outs = []
    for t in range(T):
        S = S * gg[:, t].exp()[..., None, None]
        kt = kk[:, t]
        delta = (vv[:, t] - torch.einsum("bhkv,bhk->bhv", S, kt)) * bb[:, t][..., None]
        S = S + kt[..., :, None] * delta[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, qq[:, t]) * scale)
    o = torch.stack(outs, 1)
    loss = (o * do.double()).sum()
    if dst is not None:
        loss = loss + (S * dst.double()).sum()
    wrt = f + ([S_init] if s0 is not None else [])
    grads = torch.autograd.grad(loss, wrt)
    return o.detach(), grads


def peer(fn, q, k, v, g, beta, do, s0, dst, scale):
    x = [t.detach().clone().requires_grad_(True) for t in (q, k, v, g, beta)]
    h0 = s0.float().clone().requires_grad_(True) if s0 is not None else None
    o, ht = fn(*x, scale=scale, initial_state=h0, output_final_state=True)
    outs, douts = [o], [do]
    if dst is not None:
        outs.append(ht)
        douts.append(dst.float())
    grads = torch.autograd.grad(outs, x + ([h0] if h0 is not None else []), douts)
    return o.detach(), grads


def rel_head(a, b):
    """Worst relative L2 over (b, h) slices of a (B, T, H) tensor."""
    a, b = a.double(), b.double()
    num = ((a - b) ** 2).sum(1)
    den = (b ** 2).sum(1)
    return torch.sqrt(num / den).max().item()


CASES = [  # name, B, T, H, gate regimes, beta, h0, dht (H a power of two: FlashQLA's gate cumsum
    # kernel does not compile at H = 3)
    ("mixed_T64", 2, 64, 4, "mixed", "unif", False, False),
    ("mixed_T300", 2, 300, 4, "mixed", "unif", False, True),
    ("mws_T300", 2, 300, 8, "mws", "unif", False, False),
    ("mws_T1024", 1, 1024, 8, "mws", "unif", True, True),
    ("mws_beta~0_T300", 2, 300, 8, "mws", "low", False, False),
    ("mws_beta~1_T300", 2, 300, 8, "mws", "high", False, True),
    ("mixed_T4096", 1, 4096, 4, "mixed", "unif", False, False),
]


def main():
    backend, note = use_backend()
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
    dev = "cuda"
    print(f"gdn_peer_precision: {torch.cuda.get_device_name()}{note}, seed {seed}, bound {BOUND}",
          flush=True)
    gen = torch.Generator().manual_seed(seed)
    scale = D ** -0.5
    only = sys.argv[sys.argv.index("--case") + 1] if "--case" in sys.argv else None
    if only is not None and only not in [c[0] for c in CASES]:
        sys.exit(f"gdn_peer_precision: no case {only!r} (cases: {', '.join(c[0] for c in CASES)})")
    passed, worst_gh, ran = 0, 0.0, 0
    for name, B, T, H, regimes, bm, h0, dht in CASES:
        inp = draw(B, T, H, regimes, bm, h0, dht, gen)  # (drawn for every case: a case's inputs
        if only is not None and name != only:           #  do not depend on --case)
            continue
        inp = [None if x is None else x.to(dev) for x in inp]
        ran += 1
        ro, rg = reference(*inp, scale)
        po, pg = peer(chunk_gated_delta_rule, *inp, scale)
        errs = {"o": rel_l2(po, ro)}
        for nm, a, b in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), pg, rg):
            errs[nm] = rel_l2(a, b)
        errs["dg_head"] = rel_head(pg[3], rg[3])
        errs["dbeta_head"] = rel_head(pg[4], rg[4])
        ok = all(e <= BOUND for e in errs.values())  # False for NaN
        passed += ok
        worst_gh = max(worst_gh, errs["dg_head"]) if errs["dg_head"] == errs["dg_head"] else math.nan
        print(f"PEER_PREC {name} {backend} " + " ".join(f"{n} {e:.2e}" for n, e in errs.items())
              + (" pass" if ok else " FAIL"), flush=True)
    print(f"PEER_PREC_SUMMARY {backend} {passed}/{ran} worst dg_head {worst_gh:.2e}", flush=True)


if __name__ == "__main__":
    main()
