// Must NOT compile: a user's weight constraint without after_step.
#include "normlab/normlab.hpp"
struct my_constraint {
  template <class T>
  static void at_init(normlab::ParamStore<T>&) {}
  template <class Backend, class T>
  static void after_step_on(const normlab::ParamStore<T>&, T*) {}
};
struct my_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "my_scheme";
  using constraint = my_constraint;
};
normlab::Transformer<float, my_scheme, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
