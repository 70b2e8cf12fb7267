// Control for the compile-fail tests: a valid combination compiles with the same command.
#include "normlab/backend/cpu/backend.hpp"
#include "normlab/model/transformer.hpp"
normlab::Transformer<float, normlab::sphere, normlab::lerp_retract>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
