// Must NOT compile: a user's output factors without mlp(cfg).
#include "normlab/normlab.hpp"
struct my_factors {
  static constexpr std::string_view name = "my_factors";
  static constexpr bool approximate = false;
  static double attn(const normlab::ModelConfig&, std::int64_t) { return 1.0; }
};
struct my_scheme : normlab::prenorm_rms {
  static constexpr std::string_view name = "my_scheme";
  using output_factors = my_factors;
};
normlab::Transformer<float, my_scheme, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
