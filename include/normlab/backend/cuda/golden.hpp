#pragma once
// The golden check (train/golden.hpp) for the CUDA model: replays a reference
// run stored in a safetensors file on the GPU and compares every tensor with
// the same relative error and the same float32 tolerances as the CPU check.
#include <string>
#include <vector>

#include "normlab/backend/cuda/model.hpp"
#include "normlab/train/golden.hpp"

namespace normlab::cuda {

template <class Model>
GoldenReport run_golden_cuda(Backend& be, const io::SafetensorsFile& f) {
  using detail::meta_double;
  using detail::meta_int;
  const GoldenTolerance tol = golden_tolerance<float>();
  ModelConfig mc;
  mc.vocab_size = meta_int(f, "vocab_size");
  mc.n_embd = meta_int(f, "n_embd");
  mc.n_head = meta_int(f, "n_head");
  mc.n_layer = meta_int(f, "n_layer");
  mc.base_scale = meta_double(f, "base_scale");
  mc.rmsnorm_eps = meta_double(f, "rmsnorm_eps");
  const std::int64_t B = meta_int(f, "batch"), Tn = meta_int(f, "seq_len"), steps = meta_int(f, "steps");
  const double lr = meta_double(f, "lr"), grad_clip = meta_double(f, "grad_clip");
  if (f.metadata_value("lr_schedule") != "constant") throw Error(f.source() + ": only a constant lr_schedule is supported");
  if (f.metadata_value("rope") != "neox_rotate_half_base10000") throw Error(f.source() + ": unsupported rope");
  AdamWConfig oc;
  oc.beta1 = meta_double(f, "beta1");
  oc.beta2 = meta_double(f, "beta2");
  oc.eps = meta_double(f, "adam_eps");
  oc.weight_decay = meta_double(f, "weight_decay");

  Model model(be, mc, B, Tn);
  model.configure_optimizer(oc);
  std::vector<float> init(model.num_params());
  for (const ParamSpec& s : model.specs())
    f.read_into<float>("init/" + s.name, s.shape, std::span<float>(init.data() + s.offset, s.numel));
  model.set_params(init);

  GoldenReport rep;
  rep.variant = f.metadata_value("variant");
  auto compare = [&](const std::string& name, const float* ours, std::size_t n, double t) {
    const std::vector<double> ref = f.read<double>(name);
    if (ref.size() != n)
      throw Error(f.source() + ": tensor '" + name + "' has " + std::to_string(ref.size()) +
                  " elements, the model produced " + std::to_string(n));
    rep.rows.push_back({name, relative_error(std::vector<double>(ours, ours + n), ref), t});
  };
  std::vector<std::int64_t> idx(static_cast<std::size_t>(B * Tn)), tgt(idx.size());
  for (std::int64_t st = 0; st < steps; ++st) {
    const std::string p = "step" + std::to_string(st) + "/";
    f.read_into<std::int64_t>(p + "idx", {B, Tn}, std::span<std::int64_t>(idx));
    f.read_into<std::int64_t>(p + "targets", {B, Tn}, std::span<std::int64_t>(tgt));
    const float loss = float(model.forward(idx.data(), tgt.data(), B, Tn));
    if (f.contains(p + "loss")) compare(p + "loss", &loss, 1, tol.values);
    if (f.contains(p + "logits")) {
      const std::vector<float> lg = model.logits();
      compare(p + "logits", lg.data(), lg.size(), tol.values);
    }
    model.backward();
    const std::vector<float> grads = model.get_grads();
    for (const ParamSpec& ps : model.specs())
      if (f.contains(p + "grad/" + ps.name)) compare(p + "grad/" + ps.name, grads.data() + ps.offset, ps.numel, tol.values);
    const float gn = float(model.step(lr, grad_clip));
    if (f.contains(p + "grad_norm")) compare(p + "grad_norm", &gn, 1, tol.values);
    const std::vector<float> params = model.get_params();
    for (const ParamSpec& ps : model.specs())
      if (f.contains(p + "param/" + ps.name))
        compare(p + "param/" + ps.name, params.data() + ps.offset, ps.numel, tol.params);
  }
  return rep;
}

}  // namespace normlab::cuda
