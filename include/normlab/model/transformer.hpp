#pragma once
// Decoder-only transformer, written once over its policies and its backend:
// Transformer<T, Scheme, Residual, Backend>. Transformer<double, prenorm_rms,
// residual_add> is the reference pre-norm GPT; Transformer<T, sphere,
// lerp_retract> is nGPT; a user's scheme or rule is a type of their own
// (docs/extending.md). The block calls its policies' sites in one place:
//
//   x  = input_norm(h);  q,k,v = x W_q,k,vᵀ;  q,k = qk(q,k)  (RoPE + the scheme's treatment)
//   y  = attention(q,k,v);  a = output_norm(c_att · y W_oᵀ);  h = residual(h, a)
//   x  = input_norm(h);  act = mlp_activation(x W_fcᵀ);  m = output_norm(c_mlp · act W_projᵀ);  h = residual(h, m)
//   logits = logit_scale(final_norm(h) W_headᵀ);  after each optimizer step: constraint(weights)
// with h₀ = embedding_norm(wte[idx] (+ wpe[pos] for learned positions)), and with
// config.bias a bias after every block GEMM (q, k, v, o, fc, proj).
//
// Forward stores what backward needs in an arena laid out once for
// (max_batch, max_seq); backward is written by hand, layer by layer, in reverse.
// Dims: B batch, T sequence, C = d, H heads, D = dk = C/H, Hkv key/value heads,
// KV = Hkv·D, F = d_ff (4C by default), UV = 2F for a gated activation else F,
// V vocab, N = B*T. With Hkv < H (grouped-query attention) k and v are widened
// to H heads for the attention kernels and their gradients summed back.
//
// The class (transformer_class.hpp), its construction (transformer_build.hpp) and its
// passes (transformer_passes.hpp) are headers of their own; include this one.
#include "normlab/model/transformer_build.hpp"
#include "normlab/model/transformer_class.hpp"
#include "normlab/model/transformer_passes.hpp"
#include "normlab/nn/policies.hpp"

namespace normlab {

template <class T>
using GPT = Transformer<T, prenorm_rms, residual_add>;
template <class T>
using NGPT = Transformer<T, sphere, lerp_retract>;
template <class T>
using ANGPT = Transformer<T, approx_sphere, lerp_nu>;

}  // namespace normlab
