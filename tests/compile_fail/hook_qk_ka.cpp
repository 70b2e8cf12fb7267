// Must NOT compile: a user's qk site without ka() (the keys attention sees).
#include "normlab/normlab.hpp"
struct my_qk {
  static constexpr std::string_view name = "my_qk";
  template <class T, class Backend>
  struct site {
    T* q = nullptr;
    void declare(normlab::ParamStore<T>&, const std::string&, const normlab::ModelConfig&) {}
    void bind(normlab::Arena<T>&, std::int64_t, const normlab::ModelConfig&) {}
    void forward(normlab::StepContext<T>&, T* q_, T*) { q = q_; }
    const T* qa() const { return q; }
    void backward(normlab::StepContext<T>&, T*, T*, T*) {}
  };
};
struct my_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "my_scheme";
  using qk = my_qk;
};
normlab::Transformer<float, my_scheme, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
