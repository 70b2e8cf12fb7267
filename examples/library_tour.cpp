// The library from a user's own C++ code, in one file (docs/library.md walks
// through it): a model as one type, AdamW, data and batches, a training loop,
// a checkpoint the tools accept (train-ngpt --sample, normlab-diagnose), loading
// it back, generating with the KV cache, and a gradient check of the type.
//   library_tour [OUT_DIR]
#include <cstdio>
#include <string>
#include <vector>

#include "normlab/normlab.hpp"

int main(int argc, char** argv) {
  using namespace normlab;
  const std::string out = argc > 1 ? argv[1] : "library_tour_out";
  try {
    // 1. A model: the normalization scheme and the residual rule are template arguments.
    using Model = Transformer<float, sphere, lerp_retract>;  // = NGPT<float>, the "ngpt" variant
    ModelConfig mc;
    mc.vocab_size = 256;  // byte tokens
    mc.n_embd = 64;
    mc.n_head = 4;
    mc.n_layer = 2;
    const std::int64_t B = 8, T = 64;
    std::printf("memory: %.1f MiB for batch %lld x %lld\n", Model::memory_plan(mc, B, T).total() / 1048576.0,
                (long long)B, (long long)T);
    Model model(mc, B, T);  // every buffer of a step is allocated here, once
    model.init(/*seed=*/1);

    // 2. The optimizer: AdamW with PyTorch semantics and per-role groups (nGPT: no weight decay).
    AdamWConfig oc;
    oc.weight_decay = 0.0;
    AdamW<float> opt(model.params(), oc);

    // 3. Data: here a synthetic language with a known entropy floor; data::load_text_file
    //    reads a UTF-8 file as bytes. The sampler's state (seed, batches drawn) makes
    //    resumed runs draw the same batches.
    const data::TokenData td = data::make_synthetic(200'000, 20'000, /*seed=*/1);
    data::BatchSampler sampler(td.train, B, T, /*seed=*/1);
    std::vector<std::int64_t> idx(B * T), tgt(B * T);

    // 4. The loop: forward, backward, clip, AdamW, re-normalize (train_step does all five).
    const double lr = 1e-2;  // nGPT's scales want a larger lr than GPT's 3e-3 at this size
    double first = 0, last = 0;
    for (int step = 0; step < 60; ++step) {
      sampler.next(idx.data(), tgt.data());
      const StepResult r = train_step(model, opt, idx.data(), tgt.data(), B, T, lr, /*grad_clip=*/1.0);
      if (step == 0) first = r.loss;
      last = r.loss;
    }
    std::printf("train loss %.3f -> %.3f (entropy floor %.3f)\n", first, last, td.entropy_floor_nats);

    // 5. A checkpoint: save_checkpoint records the variant, the whole config and
    //    max_seq, so `train-ngpt --sample` and `normlab-diagnose` accept it as it is.
    std::filesystem::create_directories(out);
    const std::string ckpt = out + "/ckpt.safetensors";
    save_checkpoint(ckpt, model, &opt);

    // 6. Loading it back refuses another variant, another config, or non-finite values.
    Model again(mc, 1, T);
    load_checkpoint(io::SafetensorsFile::open(ckpt), again, static_cast<AdamW<float>*>(nullptr));

    // 7. Generation with the KV cache: each decode_step feeds one token.
    auto cache = again.make_kv_cache();
    const float* logits = nullptr;
    for (std::int64_t t : {3, 1, 4}) logits = again.decode_step(t, cache);
    int best = 0;
    for (int v = 1; v < mc.vocab_size; ++v)
      if (logits[v] > logits[best]) best = v;
    std::printf("most likely token after 3 1 4: %d\n", best);

    // 8. A gradient check of the type (float64, central differences).
    double worst = 0;
    for (const auto& e : check_model_gradients<Transformer<double, sphere, lerp_retract>>(/*seed=*/7, 8))
      worst = std::max(worst, e.rel_error);
    std::printf("gradcheck: worst relative error %.2e\n", worst);
    return last < first && worst < 1e-6 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "library_tour: %s\n", e.what());
    return 2;
  }
}
