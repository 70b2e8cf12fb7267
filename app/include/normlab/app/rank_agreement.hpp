#pragma once
// What every rank of a job must share (binary, flags, data, start step and
// parameters), fingerprinted and compared, with a message naming what differs.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/core/process.hpp"
#include "normlab/dist/comm.hpp"
#include "normlab/train/data.hpp"
#include "normlab/app/run_options.hpp"

namespace normlab {
namespace detail {

// A 64-bit FNV-1a hash: the ranks' fingerprints of binary, data and parameters.
inline std::uint64_t fnv1a(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
inline std::string hex(std::uint64_t h) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}
inline std::string executable_hash() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  if (!f) return "unknown";
  std::vector<char> buf(1 << 16);
  std::uint64_t h = 1469598103934665603ull;
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    h = fnv1a(buf.data(), std::size_t(f.gcount()), h);
  }
  return hex(h);
}

// What a rank was asked to do: its binary, the variant and every flag as given
// (defaults not yet applied, so any difference on the command lines shows).
inline std::vector<std::pair<std::string, std::string>> flags_fingerprint(const TrainOptions& o,
                                                                          std::string_view variant) {
  return {{"binary (hash)", executable_hash()},
          {"variant", std::string(variant)},
          {"data", o.data},
          {"data-dir", o.data_dir},
          {"vocab", std::to_string(o.vocab)},
          {"steps", std::to_string(o.steps)},
          {"batch", std::to_string(o.batch)},
          {"seq", std::to_string(o.seq)},
          {"d", std::to_string(o.d)},
          {"layers", std::to_string(o.layers)},
          {"heads", std::to_string(o.heads)},
          {"kv-heads", std::to_string(o.kv_heads)},
          {"d-ff", std::to_string(o.d_ff)},
          {"window", std::to_string(o.window)},
          {"precision", o.precision},
          {"positions", o.positions},
          {"bias", std::to_string(o.bias)},
          {"alpha-init", exact_string(o.alpha_init)},
          {"angpt-attn-factor", exact_string(o.angpt_attn_factor)},
          {"angpt-mlp-factor", exact_string(o.angpt_mlp_factor)},
          {"angpt-residual-factor", exact_string(o.angpt_residual_factor)},
          {"lr", exact_string(o.lr)},
          {"min-lr", exact_string(o.min_lr)},
          {"warmup", std::to_string(o.warmup)},
          {"weight-decay", exact_string(o.weight_decay)},
          {"optimizer", o.optimizer},
          {"beta1", exact_string(o.beta1)},
          {"beta2", exact_string(o.beta2)},
          {"eps", exact_string(o.eps)},
          {"momentum", exact_string(o.momentum)},
          {"ns-steps", std::to_string(o.ns_steps)},
          {"ns-precision", o.ns_precision},
          {"nesterov", o.nesterov ? "yes" : "no"},
          {"muon-lr", exact_string(o.muon_lr)},
          {"opt", [&] {
             std::string t;
             for (const auto& [k, v] : o.opt_params) t += k + "=" + exact_string(v) + ";";
             return t;
           }()},
          {"schedule", o.schedule},
          {"decay-frac", exact_string(o.decay_frac)},
          {"decay-shape", o.decay_shape},
          {"grad-clip", exact_string(o.grad_clip)},
          {"accum", std::to_string(o.accum)},
          {"seed", std::to_string(o.seed)},
          {"eval-every", std::to_string(o.eval_every)},
          {"eval-batches", std::to_string(o.eval_batches)},
          {"ckpt-every", std::to_string(o.ckpt_every)},
          {"snapshot-every", std::to_string(o.snapshot_every)},
          {"out", o.out.empty() ? std::string() : std::filesystem::absolute(o.out).string()},
          {"resume", o.resume ? "yes" : "no"},
          {"overwrite", o.overwrite ? "yes" : "no"},
          {"stop-at", std::to_string(o.stop_at)},
          {"on-nonfinite", o.on_nonfinite},
          {"fault-nan-at", std::to_string(o.fault_nan_at)},
          {"time-steps", std::to_string(o.time_steps)},
          {"zero", std::to_string(o.zero)},
          {"dp-bucket", std::to_string(o.dp_bucket)}};
}
inline std::string tokens_hash(const data::TokenData& td) {
  const std::uint64_t h = fnv1a(td.val.data(), td.val.size() * sizeof(td.val[0]));
  return hex(fnv1a(td.train.data(), td.train.size() * sizeof(td.train[0]), h));
}

// A rank other than 0 that knows rank 0 is reporting an error and ending the
// job: it waits in a barrier rank 0 never enters, so the message is printed
// before the abort reaches anyone.
template <class Comm>
[[noreturn]] void wait_for_abort(Comm& comm) {
  comm.barrier();
  comm.abort(2);
}
// Ends a check every rank makes: rank 0 found `problem` (empty: none) and throws
// it; the others learn of it and wait for rank 0's abort.
template <class Comm>
void report_from_rank0(Comm& comm, const std::string& problem) {
  if (comm.broadcast_int(problem.empty() ? 0 : 1) == 0) return;
  if (comm.rank() == 0) throw Error(problem);
  wait_for_abort(comm);
}

// Every rank's fingerprint (key = value lines) must equal rank 0's: a job whose
// ranks run another binary, variant, flag or data would average gradients of
// different runs. Refused on rank 0 with the first difference, naming both sides.
// `make` builds the fingerprint only when there are other ranks to compare with:
// on one process nothing is hashed.
template <class Comm, class MakeFingerprint>
void check_ranks_agree(Comm& comm, MakeFingerprint&& make) {
  if (comm.size() == 1) return;
  const std::vector<std::pair<std::string, std::string>> fingerprint = make();
  for (std::size_t i = 0; i < fingerprint.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (fingerprint[i].first == fingerprint[j].first)
        throw Error("check_ranks_agree: the fingerprint names " + fingerprint[i].first + " twice");
  std::string mine;
  for (const auto& [k, v] : fingerprint) mine += k + "=" + v + "\n";
  const std::vector<std::string> all = comm.gather_strings(mine);
  std::string problem;
  if (comm.rank() == 0) {
    auto split = [](const std::string& s) {
      std::map<std::string, std::string> m;
      std::size_t a = 0;
      while (a < s.size()) {
        const std::size_t e = s.find('\n', a), eq = s.find('=', a);
        m[s.substr(a, eq - a)] = s.substr(eq + 1, e - eq - 1);
        a = e + 1;
      }
      return m;
    };
    const auto ref = split(all[0]);
    for (std::size_t r = 1; r < all.size() && problem.empty(); ++r) {
      const auto other = split(all[r]);
      for (const auto& [k, v] : fingerprint)
        if (other.count(k) == 0 || other.at(k) != ref.at(k)) {
          problem = "the ranks disagree on " + k + ": rank 0 has " + ref.at(k) + ", rank " + std::to_string(r) +
                    " has " + (other.count(k) ? other.at(k) : std::string("nothing")) +
                    " (every rank must run the same binary, variant, flags and data)";
          break;
        }
    }
  }
  report_from_rank0(comm, problem);
}

// The parameters every rank holds must stay bit-identical (same reduced
// gradients, same optimizer step); checked at each checkpoint.
template <class Comm, class Store>
void check_parameters_agree(Comm& comm, const Store& params, std::int64_t step) {
  if (comm.size() == 1) return;
  const std::string h = hex(fnv1a(params.values().data(), params.values().size() * sizeof(params.values()[0])));
  const std::vector<std::string> all = comm.gather_strings(h);
  std::string problem;
  if (comm.rank() == 0)
    for (std::size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0]) {
        problem = "after step " + std::to_string(step) + " rank " + std::to_string(r) +
                  "'s parameters differ from rank 0's (hash " + all[r] + " vs " + all[0] +
                  "): the ranks' all-reduce did not give every rank the same sums";
        break;
      }
  report_from_rank0(comm, problem);
}

}  // namespace detail
}  // namespace normlab
