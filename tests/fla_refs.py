# tests/fla_refs.py — fla's Triton-backed ops as plain torch code of the same maths, to put in
# place of any of them (monkeypatched, in the calling script only; fla's source untouched):
#   gdr            chunk_gated_delta_rule / fused_recurrent_gated_delta_rule ->
#                  fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule, after the
#                  in-kernel prologue of ChunkGatedDeltaRuleFunction.forward done in torch: q,k
#                  l2norm (x / sqrt(sum x^2 + 1e-6), fla/modules/l2norm.py), beta = sigmoid(b) *
#                  (2 if allow_neg_eigval), g = fla's naive_gdn_gate (-exp(A_log) softplus(a +
#                  dt_bias)), scale = K^-1/2 (chunk.py default)
#   conv           causal_conv1d -> F.conv1d depthwise, left pad W-1, then SiLU (triton kernel:
#                  y[t] = sum_j w[d, j] x[t - W + 1 + j])
#   rmsnorm        fla RMSNorm -> fla.modules.layernorm.rms_norm_ref (residual add, prenorm),
#                  upcast fp32
#   rmsnorm_gated  FusedRMSNormGated -> x * rsqrt(mean(x^2) + eps) * w * g * sigmoid(g) (swish,
#                  as the kernel)
#   mlp            GatedMLP swiglu -> down(silu(gate) * up) (swiglu_fwd_kernel: x sigmoid(x) y)
#   rotary         rotary_embedding -> fla.modules.rotary.rotary_embedding_ref on
#                  cos/sin[offset:offset+T]
# and flash_attn_func -> sdpa_window (torch SDPA with keys t - window < j <= t), which use()
# always installs when flash_attn is absent.
# Used by tests/fla_export_check_cpu.py (every op, on the CPU) and tests/gpu/fla_export_check.py
# (gdr alone, to tell the export's mapping from fla's fp32 GDN kernel).
import sys

import torch
import torch.nn.functional as F

import fla  # noqa: F401
import fla.layers.attn as fla_attn
import fla.layers.gated_deltanet as fla_gdn
import fla.modules.conv.causal_conv1d  # noqa: F401
import fla.modules.layernorm as fla_ln
import fla.modules.mlp as fla_mlp
import fla.modules.rotary as fla_rot
from fla.modules import FusedRMSNormGated, RMSNorm
from fla.ops.gated_delta_rule.gate import naive_gdn_gate
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

# `import fla.modules.conv.causal_conv1d as x` gives the function the package exports, not the module
fla_cc = sys.modules["fla.modules.conv.causal_conv1d"]


def l2norm(x, eps=1e-6):
    x = x.float()
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gdr_ref(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
            use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
            allow_neg_eigval=False, A_log=None, dt_bias=None, cu_seqlens=None, **_):
    assert cu_seqlens is None and initial_state is None
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta.float()) * (2.0 if allow_neg_eigval else 1.0)
    if use_gate_in_kernel:
        g = naive_gdn_gate(g, A_log, dt_bias)
    if scale is None:
        scale = k.shape[-1] ** -0.5
    o, _ = naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=scale)
    return o.to(v.dtype), None


def conv_ref(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
             activation=None, cu_seqlens=None, **_):
    assert residual is None and initial_state is None and cu_seqlens is None
    D, W = weight.shape
    y = F.conv1d(F.pad(x.transpose(1, 2).float(), (W - 1, 0)), weight.float().unsqueeze(1), bias, groups=D)
    y = y.transpose(1, 2)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    return y.to(x.dtype), None


def rmsnorm_fwd(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    out = fla_ln.rms_norm_ref(x, self.weight, self.bias, residual=residual, eps=self.eps,
                              prenorm=prenorm, upcast=True)
    # the ref with upcast hands back the fp32 sum as residual; the kernel stores it in x's dtype
    return (out[0], out[1].to(x.dtype if not residual_in_fp32 else torch.float32)) if prenorm else out


def rmsnorm_gated_fwd(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
    assert residual is None and self.activation in ("swish", "silu") and self.bias is None
    xf, gf = x.float(), g.float()
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps) * self.weight.float()
    return (y * gf * torch.sigmoid(gf)).to(x.dtype)


def mlp_fwd(self, x, **_):
    assert self.hidden_act == "swish"
    gate, up = self.gate_proj(x), self.up_proj(x)
    return self.down_proj(F.silu(gate.float()).mul(up.float()).to(x.dtype))


def rotary_ref(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None, **_):
    assert isinstance(seqlen_offsets, int) and cu_seqlens is None
    t = x.shape[1]
    return fla_rot.rotary_embedding_ref(x, cos[seqlen_offsets:seqlen_offsets + t],
                                        sin[seqlen_offsets:seqlen_offsets + t], interleaved)


def sdpa_window(q, k, v, causal=True, window_size=(-1, -1), **_):
    Tq, Tk = q.shape[1], k.shape[1]
    i = torch.arange(Tq, device=q.device)[:, None] + (Tk - Tq)
    j = torch.arange(Tk, device=q.device)[None, :]
    allow = j <= i
    if window_size[0] >= 0:
        allow &= j >= i - window_size[0]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=allow)
    return o.transpose(1, 2).contiguous()


SLOTS = {
    "gdr": [(fla_gdn, "chunk_gated_delta_rule"), (fla_gdn, "fused_recurrent_gated_delta_rule")],
    "conv": [(fla_gdn, "causal_conv1d"), (fla_cc, "causal_conv1d")],  # ShortConvolution imports it from fla_cc
    "rmsnorm": [(RMSNorm, "forward")],
    "rmsnorm_gated": [(FusedRMSNormGated, "forward")],
    "mlp": [(fla_mlp.GatedMLP, "forward")],
    "rotary": [(fla_rot, "rotary_embedding")],
}
ALL = frozenset(SLOTS)
_REF = {"gdr": [gdr_ref, gdr_ref], "conv": [conv_ref, conv_ref], "rmsnorm": [rmsnorm_fwd],
        "rmsnorm_gated": [rmsnorm_gated_fwd], "mlp": [mlp_fwd], "rotary": [rotary_ref]}
_FLA = {k: [getattr(o, n) for o, n in v] for k, v in SLOTS.items()}
FLASH_ATTN = fla_attn.flash_attn_func is not None


def use(refs):
    """The ops named in refs (a subset of ALL) run as torch references, the others as fla's."""
    for k, v in SLOTS.items():
        for (o, n), f_fla, f_ref in zip(v, _FLA[k], _REF[k]):
            setattr(o, n, f_ref if k in refs else f_fla)
    if not FLASH_ATTN:
        fla_attn.flash_attn_func = sdpa_window
