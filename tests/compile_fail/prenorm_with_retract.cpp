// Must NOT compile: a pre-norm GPT with a residual that retracts to the sphere.
#include "normlab/backend/cpu/backend.hpp"
#include "normlab/model/transformer.hpp"
normlab::Transformer<float, normlab::prenorm_rms, normlab::slerp>* p = nullptr;
int main() { return sizeof(*p) > 0 ? 0 : 1; }
