#pragma once
// What a block's policies see while they run: the model's config, its
// parameter store (values and gradients by offset), the sizes of the current
// call, the RoPE tables and the model's shared scratch. One StepContext per
// model; the model sets the sizes before each forward/backward.
//
// Every policy site (a normalization, the q/k treatment, an activation, a
// learned scale, a residual rule) follows one shape:
//   declare(params, prefix, cfg, …)  adds its parameters (name, shape, role,
//                                    constraint axis, init) to the store
//   bind(arena, N, …)                takes what it saves for backward from the
//                                    model's arena (called twice: count, bind)
//   forward(ctx, …) / backward(ctx, …)  written against the Backend's leaf ops
// Parameter gradients accumulate (+=); activation gradients are written (=).
#include <cstddef>
#include <cstdint>

#include "normlab/nn/config.hpp"
#include "normlab/nn/params.hpp"

namespace normlab {

template <class T>
struct StepContext {
  const ModelConfig* cfg = nullptr;
  ParamStore<T>* params = nullptr;  // the specs (names, shapes, offsets)
  // The live parameter values and gradients, in the backend's memory (the
  // store's own host arrays on the CPU; device buffers on a GPU).
  T* values = nullptr;
  T* grads = nullptr;
  std::int64_t B = 0, seq = 0;  // batch and sequence length of the current call
  std::int64_t pos0 = 0;       // position of the first token (decoding)
  const T* rope_cos = nullptr;  // (max_seq, D/2)
  const T* rope_sin = nullptr;
  // Shared scratch (the model's arena), valid within one policy call:
  T* scale_tmp = nullptr;  // (max(2F, V)) an effective learned scale
  T* d_scale = nullptr;    // (max(2F, V)) gradient of an expanded scale before folding
  T* alpha_tmp = nullptr;  // (C) effective α of the current residual step
  T* d_alpha = nullptr;    // (C)

  std::int64_t N() const { return B * seq; }
  std::int64_t C() const { return cfg->n_embd; }
  std::int64_t H() const { return cfg->n_head; }
  std::int64_t D() const { return cfg->head_dim(); }
  std::int64_t Hkv() const { return cfg->kv_heads(); }  // key/value heads (H unless grouped)
  std::int64_t KV() const { return cfg->kv_dim(); }     // width of a k or v row: Hkv·D
  T* P(std::size_t off) const { return values + off; }
  T* G(std::size_t off) const { return grads + off; }
};

}  // namespace normlab
