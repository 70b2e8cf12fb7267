// Must NOT compile: anGPT's scalar factors without an interpolating residual.
#include "normlab/backend/cpu/backend.hpp"
#include "normlab/model/transformer.hpp"
normlab::Transformer<float, normlab::approx_sphere, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
