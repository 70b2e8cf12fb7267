// Must NOT compile: a user's norm site whose backward lacks one argument (x).
// The first error names the hook (norm site) and the member (backward).
#include "normlab/normlab.hpp"
struct my_norm {
  static constexpr std::string_view name = "my_norm";
  template <class T, class Backend>
  struct site {
    void declare(normlab::ParamStore<T>&, const std::string&, std::string_view, const normlab::ModelConfig&) {}
    void bind(normlab::Arena<T>&, std::int64_t, std::int64_t) {}
    const T* forward(normlab::StepContext<T>&, const T* x, std::int64_t, std::int64_t) { return x; }
    const T* backward(normlab::StepContext<T>&, T*, const T* dy, std::int64_t, std::int64_t) { return dy; }
  };
};
struct my_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "my_scheme";
  using input_norm = my_norm;
};
normlab::Transformer<float, my_scheme, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
