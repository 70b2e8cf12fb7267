// Must NOT compile: a user's logit scale without bind.
#include "normlab/normlab.hpp"
struct my_logits {
  static constexpr std::string_view name = "my_logits";
  template <class T, class Backend>
  struct site {
    void declare(normlab::ParamStore<T>&, const normlab::ModelConfig&) {}
    const T* forward(normlab::StepContext<T>&, const T* raw, std::int64_t, std::int64_t) { return raw; }
    void backward(normlab::StepContext<T>&, T*, const T*, std::int64_t, std::int64_t) {}
  };
};
struct my_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "my_scheme";
  using logit_scale = my_logits;
};
normlab::Transformer<float, my_scheme, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
