// Launch limits the CUDA backend must refuse before it enqueues anything, so this
// test needs no GPU and never skips: a grid's y dimension holds at most 65535
// blocks, and attention puts batch × heads there, the column reductions
// ⌈rows/256⌉ and the embedding backward ⌈C/128⌉. Without the checks a larger size
// either fails the launch with "invalid configuration argument" far from its cause
// or, after the unsigned narrowing, runs a grid that silently covers part of the work.
#include <cstdio>
#include <string>

#include "harness.hpp"
#include "normlab/backend/cuda/kernels.hpp"

using namespace normlab;
using namespace normlab::cuda;

namespace {

// Runs f, which must throw normlab::Error whose text contains every word of `expect`.
template <class F>
void refuses(test::Tally& t, const std::string& what, std::initializer_list<const char*> expect, F&& f) {
  std::string msg = "(no error)";
  bool ok = false;
  try {
    f();
  } catch (const Error& e) {
    msg = e.what();
    ok = true;
    for (const char* w : expect) ok = ok && msg.find(w) != std::string::npos;
  }
  t.truth(what + ": " + msg, ok);
}

}  // namespace

int main() {
  test::Tally t;
  t.test = "test_cuda_limits";
  // 4096 × 16 = 65536 head-blocks: one too many; the pointers are never touched.
  refuses(t, "attention_forward, batch x heads = 65536", {"attention_forward", "65536", "65535", "batch 4096", "heads 16"},
          [] { k::attention_forward(Dtype::f32, nullptr, nullptr, nullptr, nullptr, nullptr, 4096, 8, 16, 64, 1.f, 0, nullptr); });
  refuses(t, "attention_backward, batch x heads = 65536", {"attention_backward", "65535"}, [] {
    k::attention_backward(Dtype::bf16, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                          nullptr, 65536, 8, 1, 64, 1.f, 0, nullptr);
  });
  refuses(t, "embedding_backward, n_embd 8388609", {"embedding_backward", "65537", "n_embd 8388609"}, [] {
    k::embedding_backward(Dtype::f32, nullptr, nullptr, nullptr, nullptr, 1, nullptr, 8388609, nullptr);
  });
  // The model checks its whole envelope at construction (before any allocation).
  refuses(t, "model: batch 8192 x 8 heads", {"cuda_backend", "batch 8192", "heads 8"},
          [] { check_model_grid_limits(8192, 16, 8, 512); });
  refuses(t, "model: batch 4097 x seq 4096 tokens", {"cuda_backend", "16781312 tokens", "65552"},
          [] { check_model_grid_limits(4097, 4096, 1, 512); });
  bool fits = true;
  try {
    check_model_grid_limits(64, 8192, 16, 4096);  // large but legal: 1024 head-blocks, 2048 chunks
  } catch (const Error&) {
    fits = false;
  }
  t.truth("model: batch 64 x seq 8192 x 16 heads at d 4096 is accepted", fits);
  return t.finish("test_cuda_limits");
}
