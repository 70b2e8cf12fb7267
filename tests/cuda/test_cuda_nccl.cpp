// NcclComm on one rank, one GPU (no MPI): NCCL runs every collective of the
// data-parallel step on the model's own device buffers, and the step equals the
// MPI-free CUDA step bit for bit. A sum over one rank is the identity in any
// order, so a difference can only be a fault of the streams: a bucket reduced
// before backward wrote its gradients, or compute not waiting for a bucket.
//  * gpt and ngpt, 3 steps: gradients all-reduced in 16 Ki-value buckets started
//    while backward runs (GradientSync), then the driver's clip, AdamW and
//    constraint, against the same steps without a communicator: losses,
//    gradient norms and parameters bit-identical; several buckets; the exposed
//    time finite and >= 0;
//  * the same with ZeRO-1 (reduce to the owner, AdamW over the one shard, the
//    parameters all-gathered);
//  * gather_shards: the moments gathered into a whole buffer equal them.
// Exits 77 (skipped) without a GPU. The multi-rank path runs where several GPUs
// are: mpirun -np N train-<variant>-cuda (docs/distributed.md).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "harness.hpp"
#include "normlab/backend/cuda/cuda_backend.hpp"
#include "normlab/dist/grad_sync.hpp"
#include "normlab/dist/nccl.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/train/variants.hpp"

using namespace normlab;
using cuda::test::Tally;
using Comm = dist::NcclComm<dist::SingleProcess>;

namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 300;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_layer = 2;
  return c;
}

std::vector<std::int64_t> random_tokens(std::mt19937_64& rng, std::int64_t n, std::int64_t V) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = std::int64_t(rng() % std::uint64_t(V));
  return v;
}
std::vector<float> download(const float* dev, std::size_t n) {
  std::vector<float> h(n);
  cuda_backend::download(h.data(), dev, std::int64_t(n));
  return h;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<float> params, exp_avg;
  int buckets = 0;
  double exposed = 0;
};

// The driver's step (accumulate_gradients, DataParallel::update) on one rank,
// with the collectives it runs on 2+ ranks; comm = nullptr: the one-process step.
template <class Tag>
Run train(Comm* comm, bool zero) {
  using Model = typename Tag::template model<float, cuda_backend>;
  const std::int64_t B = 4, T = 64;
  Model m(small_config(), B, T);
  m.init(77);
  const std::size_t n = m.params().size();
  const std::vector<std::size_t> shards{0, n};
  AdamWConfig oc;
  oc.weight_decay = keeps_unit_hidden<typename Model::scheme> ? 0.0 : 0.1;
  AdamW<float, cuda_backend> opt(m.params(), oc, 0, n);
  std::mt19937_64 rng(9);
  Run r;
  r.exposed = 0;
  for (int s = 0; s < 3; ++s) {
    const auto idx = random_tokens(rng, B * T, 300), tgt = random_tokens(rng, B * T, 300);
    r.losses.push_back(m.forward(idx.data(), tgt.data(), B, T));
    if (comm) {
      dist::GradientSync<float, Comm> sync(*comm, n, zero ? &shards : nullptr, std::size_t(1) << 14);
      sync.begin(m.param_grads());
      m.backward(false, [&](std::size_t from) { sync.ready(from); });
      const double e = sync.finish();
      r.exposed = std::isfinite(e) && e >= 0 ? r.exposed + e : NAN;
      r.buckets = sync.buckets();
      cuda_backend::scale(m.param_grads(), std::int64_t(n), 1.0f / float(comm->size()));  // the mean over ranks
    } else {
      m.backward(false);
    }
    r.norms.push_back(clip_grad_norm<cuda_backend>(m.param_grads(), std::int64_t(n), 1.0));
    opt.step(m.params(), m.param_values(), m.param_grads(), 3e-3);
    if (comm && zero) comm->allgather_shards(m.param_values(), shards);
    m.apply_constraint();
  }
  m.download_params();
  r.params.assign(m.params().values().begin(), m.params().values().end());
  if (comm) {  // rank 0 gathers the moments of every shard (for a checkpoint)
    cuda::device_vector<float> whole;
    whole.assign(n, 0.0f);
    comm->gather_shards(opt.exp_avg().data(), whole.data(), shards);
    r.exp_avg = download(whole.data(), n);
  } else {
    r.exp_avg = download(opt.exp_avg().data(), n);
  }
  return r;
}

template <class Tag>
void check(Comm& comm, Tally& t) {
  const Run plain = train<Tag>(nullptr, false);
  for (bool zero : {false, true}) {
    const Run nccl = train<Tag>(&comm, zero);
    const std::string nm = std::string(Tag::name) + (zero ? " (ZeRO-1)" : "") + ", NCCL on 1 rank";
    t.truth(nm + ": losses bit-identical to the one-process CUDA step (3 steps)",
            nccl.losses.size() == 3 &&
                std::memcmp(nccl.losses.data(), plain.losses.data(), 3 * sizeof(double)) == 0);
    t.truth(nm + ": gradient norms bit-identical",
            std::memcmp(nccl.norms.data(), plain.norms.data(), 3 * sizeof(double)) == 0);
    t.truth(nm + ": parameters bit-identical", same_bits(nccl.params, plain.params));
    t.truth(nm + ": gathered moments equal the one-process moments", same_bits(nccl.exp_avg, plain.exp_avg));
    t.truth(nm + ": " + std::to_string(nccl.buckets) + " buckets started during backward (> 1)", nccl.buckets > 1);
    t.truth(nm + ": exposed communication time finite and >= 0", std::isfinite(nccl.exposed));
  }
}

}  // namespace

int main() {
  return cuda::test::run_test("test_cuda_nccl", [] {
    cuda::Backend be;
    cuda::use(be);
    Comm comm;
    Tally t;
    t.truth("NcclComm<SingleProcess>: one rank", comm.rank() == 0 && comm.size() == 1);
    check<variants::gpt>(comm, t);
    check<variants::ngpt>(comm, t);
    return t.finish("test_cuda_nccl");
  });
}
