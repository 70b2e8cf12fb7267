#pragma once
// Names of the elementwise activations a backend evaluates (pointwise_forward
// and pointwise_backward), shared by the policies that ask for them and the
// backends that run them.
namespace normlab {

enum class Pointwise {
  relu2,      // relu(u)²
  gelu_tanh,  // ½u(1 + tanh(√(2/π)(u + 0.044715u³)))  (GPT-2's approximation)
  gelu_erf,   // u·Φ(u) = ½u(1 + erf(u/√2))
};

}  // namespace normlab
