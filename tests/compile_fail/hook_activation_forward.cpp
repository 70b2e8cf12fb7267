// Must NOT compile: a user's MLP activation whose forward takes (act, uv) only.
#include "normlab/normlab.hpp"
struct my_act {
  static constexpr std::string_view name = "my_act";
  template <class T, class Backend>
  struct site {
    void declare(normlab::ParamStore<T>&, const std::string&, const normlab::ModelConfig&) {}
    void forward(normlab::StepContext<T>&, T*, const T*) {}
    void backward(normlab::StepContext<T>&, T*, const T*, const T*, std::int64_t, std::int64_t) {}
  };
};
struct my_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "my_scheme";
  using mlp_activation = my_act;
};
normlab::Transformer<float, my_scheme, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
