// NcclComm on one rank, one GPU (no MPI): NCCL runs every collective of the
// data-parallel step on the model's own device buffers.
//  * The streams' ordering, made visible: on one rank NCCL's in-place sum is no
//    operation at all, so the bucket's reduction is a PreMulSum by 2 here
//    (set_premultiply), which reads and writes the buffer. Compute is held for
//    50 ms by a host function, then writes 3s; the reduction started by ready()
//    must see them (6), and a kernel after finish() must see its result
//    (6 + 1 = 7). Reduced before the write it would give 4, after the add 8.
//  * gpt and ngpt, 3 steps of the driver's flow with the trainers' plain sum:
//    gradients all-reduced in 16 Ki-value buckets started while backward runs
//    (GradientSync), then the driver's clip, AdamW and constraint, against the
//    same steps without a communicator: losses, gradient norms and parameters
//    bit-identical; several buckets; the exposed time finite and >= 0 (on one
//    rank these check the calls and the flow, not the ordering: above);
//  * the same with ZeRO-1 (reduce to the owner, AdamW over the one shard, the
//    parameters all-gathered);
//  * gather_shards: the moments gathered into a whole buffer equal them.
// Exits 77 (skipped) without a GPU. The multi-rank path runs where several GPUs
// are: mpirun -np N train-<variant>-cuda (docs/distributed.md).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "normlab/backend/cuda/cuda_backend.hpp"
#include "normlab/dist/grad_sync.hpp"
#include "normlab/dist/cuda/nccl.hpp"
#include "normlab/model/transformer.hpp"
#include "normlab/optim/adamw.hpp"
#include "normlab/train/variants.hpp"

using namespace normlab;
#include "../support.hpp"
using cuda::test::download;
using cuda::test::random_tokens;
using cuda::test::Tally;
using Comm = dist::NcclComm<dist::SingleProcess>;

namespace {

ModelConfig small_config() { return test::small_config(300, 64, 4, 2); }
using test::same_bits;

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

void check_ordering(Comm& comm, Tally& t) {
  const std::size_t n = std::size_t(1) << 20;
  cuda::device_vector<float> buf, ones;
  buf.assign(n, 0.0f);
  ones.assign(n, 0.0f);
  cuda_backend::fill(buf.data(), std::int64_t(n), 1.0f);
  cuda_backend::fill(ones.data(), std::int64_t(n), 1.0f);
  cuda_backend::synchronize();
  comm.set_premultiply(2.0);
  dist::GradientSync<float, Comm> sync(comm, n, nullptr, n / 2);
  sync.begin(buf.data());
  // Backward's last kernels: compute is busy for 50 ms, then writes the bucket.
  const cudaHostFn_t hold = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
  NORMLAB_CUDA_CHECK(cudaLaunchHostFunc(cuda::current().stream(), hold, nullptr));
  cuda_backend::fill(buf.data() + n / 2, std::int64_t(n / 2), 3.0f);
  sync.ready(n / 2);  // the upper half is final: its reduction starts now
  cuda_backend::fill(buf.data(), std::int64_t(n / 2), 3.0f);
  const double exposed = sync.finish();  // the lower half, then wait for both
  cuda_backend::add_into(buf.data(), ones.data(), std::int64_t(n));
  comm.set_premultiply(1.0);
  const std::vector<float> got = download(buf.data(), n);
  std::size_t wrong = 0;
  float first_wrong = 7.0f;
  for (float x : got)
    if (x != 7.0f && wrong++ == 0) first_wrong = x;
  t.truth("NCCL reduction ordered after the kernels writing its bucket and before those reading it (" +
              std::to_string(wrong) + " of " + std::to_string(n) + " values != 7" +
              (wrong ? ", e.g. " + std::to_string(first_wrong) : std::string()) + ")",
          wrong == 0);
  t.truth("2 buckets, exposed time finite and >= 0", sync.buckets() == 2 && std::isfinite(exposed) && exposed >= 0);
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
    cuda::DeviceContext be;
    cuda::use(be);
    Comm comm;
    Tally t;
    t.test = "test_cuda_nccl";
    t.truth("NcclComm<SingleProcess>: one rank", comm.rank() == 0 && comm.size() == 1);
    check_ordering(comm, t);
    check<variants::gpt>(comm, t);
    check<variants::ngpt>(comm, t);
    return t.finish("test_cuda_nccl");
  });
}
