// Must NOT compile: a user's backend whose attention_backward is unusable (here
// hidden by a member of the same name that takes nothing).
#include "normlab/normlab.hpp"
struct my_backend : normlab::cpu_backend {
  static void attention_backward() = delete;
};
normlab::Transformer<float, normlab::prenorm_rms, normlab::residual_add, my_backend>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
