// Must NOT compile: a user's residual rule whose site's backward lacks dout.
#include "normlab/normlab.hpp"
struct my_rule : normlab::residual_add {
  static constexpr std::string_view name = "my_rule";
  template <class T, class Backend, normlab::ScaleKind K>
  struct site {
    void declare(normlab::ParamStore<T>&, const std::string&, std::string_view, const normlab::ModelConfig&) {}
    void bind(normlab::Arena<T>&, std::int64_t, std::int64_t) {}
    void forward(normlab::StepContext<T>&, T*, const T*, const T*, std::int64_t, std::int64_t) {}
    void backward(normlab::StepContext<T>&, T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t) {}
  };
};
normlab::Transformer<float, normlab::prenorm_rms, my_rule>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
