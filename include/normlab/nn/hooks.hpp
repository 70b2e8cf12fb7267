#pragma once
// The contract of every hook kind, as the model calls it: one concept per kind
// (a user can test a type against it), and check_scheme_hooks(), which the
// model runs first: one static_assert per member, so a site that lacks a member
// or takes other arguments fails with the hook and the member named in the
// first error line, before the compiler reaches the model's call.
//
//   norm site (input_norm, output_norm, final_norm)
//     declare(ParamStore&, prefix, where, cfg); bind(Arena&, rows, C)
//     const T* forward(ctx, x, rows, C); const T* backward(ctx, scratch, dy, x, rows, C)
//   qk site      declare(ParamStore&, prefix, cfg); bind(Arena&, N, cfg)
//                forward(ctx, q, k); const T* qa(); const T* ka(); backward(ctx, dq, dk, scratch)
//   activation   declare(ParamStore&, prefix, cfg)
//                forward(ctx, act, uv, N, F); backward(ctx, duv, dact, uv, N, F)
//   logit scale  declare(ParamStore&, cfg); bind(Arena&, N, V)
//                const T* forward(ctx, raw, N, V); backward(ctx, dlogits, raw, N, V)
//   residual     declare(ParamStore&, prefix, where, cfg); bind(Arena&, N, C)
//                forward(ctx, out, h, f, N, C); backward(ctx, dh, df, dout, out, h, f, N, C)
//   output factors  double attn(cfg, max_seq); double mlp(cfg); bool approximate
//   constraint   at_init(ParamStore&); after_step(ParamStore&);
//                after_step_on<Backend>(const ParamStore&, T* values)
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "normlab/nn/config.hpp"
#include "normlab/nn/context.hpp"
#include "normlab/nn/params.hpp"

namespace normlab {

template <class S, class T>
concept NormSite = requires(S s, ParamStore<T>& p, Arena<T>& ar, StepContext<T>& c, T* y, const T* x,
                            std::int64_t n, const ModelConfig& cfg) {
  s.declare(p, std::string(), std::string_view(), cfg);
  s.bind(ar, n, n);
  { s.forward(c, x, n, n) } -> std::convertible_to<const T*>;
  { s.backward(c, y, x, x, n, n) } -> std::convertible_to<const T*>;
};

template <class S, class T>
concept QkSite = requires(S s, const S cs, ParamStore<T>& p, Arena<T>& ar, StepContext<T>& c, T* y, std::int64_t n,
                          const ModelConfig& cfg) {
  s.declare(p, std::string(), cfg);
  s.bind(ar, n, cfg);
  s.forward(c, y, y);
  { cs.qa() } -> std::convertible_to<const T*>;
  { cs.ka() } -> std::convertible_to<const T*>;
  s.backward(c, y, y, y);
};

template <class S, class T>
concept ActivationSite = requires(S s, ParamStore<T>& p, StepContext<T>& c, T* y, const T* x, std::int64_t n,
                                  const ModelConfig& cfg) {
  s.declare(p, std::string(), cfg);
  s.forward(c, y, x, n, n);
  s.backward(c, y, x, x, n, n);
};

template <class S, class T>
concept LogitScaleSite = requires(S s, ParamStore<T>& p, Arena<T>& ar, StepContext<T>& c, T* y, const T* x,
                                  std::int64_t n, const ModelConfig& cfg) {
  s.declare(p, cfg);
  s.bind(ar, n, n);
  { s.forward(c, x, n, n) } -> std::convertible_to<const T*>;
  s.backward(c, y, x, n, n);
};

template <class S, class T>
concept ResidualSite = requires(S s, ParamStore<T>& p, Arena<T>& ar, StepContext<T>& c, T* y, const T* x,
                                std::int64_t n, const ModelConfig& cfg) {
  s.declare(p, std::string(), std::string_view(), cfg);
  s.bind(ar, n, n);
  s.forward(c, y, x, x, n, n);
  s.backward(c, y, y, x, x, x, x, n, n);
};

template <class F>
concept OutputFactors = requires(const ModelConfig& cfg, std::int64_t n) {
  { F::attn(cfg, n) } -> std::convertible_to<double>;
  { F::mlp(cfg) } -> std::convertible_to<double>;
  { F::approximate } -> std::convertible_to<bool>;
};

template <class K, class T, class Backend>
concept WeightConstraintPolicy = requires(ParamStore<T>& p, T* v) {
  K::at_init(p);
  K::after_step(p);
  K::template after_step_on<Backend>(p, v);
};

// The readable form of the concepts above, member by member, for one hook.
template <class S, class T>
constexpr bool check_norm_site() {
  static_assert(requires(S s, ParamStore<T>& p, const ModelConfig& cfg) {
    s.declare(p, std::string(), std::string_view(), cfg);
  }, "normlab: norm site (input_norm / output_norm / final_norm): member declare(ParamStore<T>&, "
     "const std::string& prefix, std::string_view where, const ModelConfig&) is missing or takes other arguments");
  static_assert(requires(S s, Arena<T>& ar, std::int64_t n) { s.bind(ar, n, n); },
                "normlab: norm site: member bind(Arena<T>&, int64 rows, int64 C) is missing or takes other arguments");
  static_assert(requires(S s, StepContext<T>& c, const T* x, std::int64_t n) {
    { s.forward(c, x, n, n) } -> std::convertible_to<const T*>;
  }, "normlab: norm site: member const T* forward(StepContext<T>&, const T* x, int64 rows, int64 C) is missing or "
     "takes other arguments");
  static_assert(requires(S s, StepContext<T>& c, T* y, const T* x, std::int64_t n) {
    { s.backward(c, y, x, x, n, n) } -> std::convertible_to<const T*>;
  }, "normlab: norm site: member const T* backward(StepContext<T>&, T* scratch, const T* dy, const T* x, int64 rows, "
     "int64 C) is missing or takes other arguments");
  return true;
}

template <class S, class T>
constexpr bool check_qk_site() {
  static_assert(requires(S s, ParamStore<T>& p, const ModelConfig& cfg) { s.declare(p, std::string(), cfg); },
                "normlab: qk site: member declare(ParamStore<T>&, const std::string& prefix, const ModelConfig&) is "
                "missing or takes other arguments");
  static_assert(requires(S s, Arena<T>& ar, std::int64_t n, const ModelConfig& cfg) { s.bind(ar, n, cfg); },
                "normlab: qk site: member bind(Arena<T>&, int64 N, const ModelConfig&) is missing or takes other "
                "arguments");
  static_assert(requires(S s, StepContext<T>& c, T* y) { s.forward(c, y, y); },
                "normlab: qk site: member forward(StepContext<T>&, T* q, T* k) is missing or takes other arguments");
  static_assert(requires(const S s) {
    { s.qa() } -> std::convertible_to<const T*>;
    { s.ka() } -> std::convertible_to<const T*>;
  }, "normlab: qk site: members const T* qa() const and const T* ka() const (what attention sees) are missing");
  static_assert(requires(S s, StepContext<T>& c, T* y) { s.backward(c, y, y, y); },
                "normlab: qk site: member backward(StepContext<T>&, T* dq, T* dk, T* scratch) is missing or takes "
                "other arguments");
  return true;
}

template <class S, class T>
constexpr bool check_activation_site() {
  static_assert(requires(S s, ParamStore<T>& p, const ModelConfig& cfg) { s.declare(p, std::string(), cfg); },
                "normlab: mlp_activation site: member declare(ParamStore<T>&, const std::string& prefix, const "
                "ModelConfig&) is missing or takes other arguments");
  static_assert(requires(S s, StepContext<T>& c, T* y, const T* x, std::int64_t n) { s.forward(c, y, x, n, n); },
                "normlab: mlp_activation site: member forward(StepContext<T>&, T* act, const T* uv, int64 N, int64 F) "
                "is missing or takes other arguments");
  static_assert(requires(S s, StepContext<T>& c, T* y, const T* x, std::int64_t n) {
    s.backward(c, y, x, x, n, n);
  }, "normlab: mlp_activation site: member backward(StepContext<T>&, T* duv, const T* dact, const T* uv, int64 N, "
     "int64 F) is missing or takes other arguments");
  return true;
}

template <class S, class T>
constexpr bool check_logit_scale_site() {
  static_assert(requires(S s, ParamStore<T>& p, const ModelConfig& cfg) { s.declare(p, cfg); },
                "normlab: logit_scale site: member declare(ParamStore<T>&, const ModelConfig&) is missing or takes "
                "other arguments");
  static_assert(requires(S s, Arena<T>& ar, std::int64_t n) { s.bind(ar, n, n); },
                "normlab: logit_scale site: member bind(Arena<T>&, int64 N, int64 V) is missing or takes other "
                "arguments");
  static_assert(requires(S s, StepContext<T>& c, const T* x, std::int64_t n) {
    { s.forward(c, x, n, n) } -> std::convertible_to<const T*>;
  }, "normlab: logit_scale site: member const T* forward(StepContext<T>&, const T* raw, int64 N, int64 V) is "
     "missing or takes other arguments");
  static_assert(requires(S s, StepContext<T>& c, T* y, const T* x, std::int64_t n) { s.backward(c, y, x, n, n); },
                "normlab: logit_scale site: member backward(StepContext<T>&, T* dlogits, const T* raw, int64 N, "
                "int64 V) is missing or takes other arguments");
  return true;
}

template <class S, class T>
constexpr bool check_residual_site() {
  static_assert(requires(S s, ParamStore<T>& p, const ModelConfig& cfg) {
    s.declare(p, std::string(), std::string_view(), cfg);
  }, "normlab: residual rule site: member declare(ParamStore<T>&, const std::string& prefix, std::string_view "
     "where, const ModelConfig&) is missing or takes other arguments");
  static_assert(requires(S s, Arena<T>& ar, std::int64_t n) { s.bind(ar, n, n); },
                "normlab: residual rule site: member bind(Arena<T>&, int64 N, int64 C) is missing or takes other "
                "arguments");
  static_assert(requires(S s, StepContext<T>& c, T* y, const T* x, std::int64_t n) { s.forward(c, y, x, x, n, n); },
                "normlab: residual rule site: member forward(StepContext<T>&, T* out, const T* h, const T* f, int64 N, "
                "int64 C) is missing or takes other arguments");
  static_assert(requires(S s, StepContext<T>& c, T* y, const T* x, std::int64_t n) {
    s.backward(c, y, y, x, x, x, x, n, n);
  }, "normlab: residual rule site: member backward(StepContext<T>&, T* dh, T* df, const T* dout, const T* out, const "
     "T* h, const T* f, int64 N, int64 C) is missing or takes other arguments");
  return true;
}

template <class F>
constexpr bool check_output_factors() {
  static_assert(requires(const ModelConfig& cfg, std::int64_t n) {
    { F::attn(cfg, n) } -> std::convertible_to<double>;
  }, "normlab: output_factors: static member double attn(const ModelConfig&, int64 max_seq) is missing");
  static_assert(requires(const ModelConfig& cfg) {
    { F::mlp(cfg) } -> std::convertible_to<double>;
  }, "normlab: output_factors: static member double mlp(const ModelConfig&) is missing");
  static_assert(requires { { F::approximate } -> std::convertible_to<bool>; },
                "normlab: output_factors: static member bool approximate is missing");
  return true;
}

template <class K, class T, class Backend>
constexpr bool check_constraint() {
  static_assert(requires(ParamStore<T>& p) { K::at_init(p); },
                "normlab: constraint: static member at_init(ParamStore<T>&) is missing");
  static_assert(requires(ParamStore<T>& p) { K::after_step(p); },
                "normlab: constraint: static member after_step(ParamStore<T>&) is missing");
  static_assert(requires(const ParamStore<T>& p, T* v) { K::template after_step_on<Backend>(p, v); },
                "normlab: constraint: static member template after_step_on<Backend>(const ParamStore<T>&, T* values) "
                "is missing");
  return true;
}

}  // namespace normlab
