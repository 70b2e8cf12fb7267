// Must NOT compile: nGPT's sphere scheme with a residual that leaves the sphere.
#include "normlab/backend/cpu/backend.hpp"
#include "normlab/model/transformer.hpp"
normlab::Transformer<float, normlab::sphere, normlab::residual_add>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
