// Must NOT compile: a GPT-2 block (layer_norm) on a backend without
// layernorm_forward/backward (here hidden by members of the same name that take
// nothing): the first error is the site's static_assert naming both ops.
#include "normlab/normlab.hpp"
struct my_backend : normlab::cpu_backend {
  static void layernorm_forward() = delete;
  static void layernorm_backward() = delete;
};
struct ln_scheme : normlab::prenorm_rms {
  using input_norm = normlab::layer_norm;
};
normlab::Transformer<float, ln_scheme, normlab::residual_add, my_backend>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
