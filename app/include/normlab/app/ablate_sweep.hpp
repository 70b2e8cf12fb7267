#pragma once
// normlab::ablate, the learning-rates and budgets: choosing each variant's rate
// from a sweep (and where the sweep goes next when its best rate sits on an
// edge), the sweep's table, how far timing rounds disagree, and tokens to
// target read off a loss-vs-budget curve. Pure logic, unit-tested; the
// definitions of target and speedup are ablate_runs.hpp's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "normlab/app/ablate_runs.hpp"
#include "normlab/core/error.hpp"

namespace normlab::ablate {

// ------------------------------------------------------------------ budgets as separate runs
// Tokens at which a loss-vs-budget curve (one run per budget, each with its
// own schedule; tokens ascending) reaches `target`: the first budget at or
// below it, interpolated in log tokens with the budget before it. nullopt when
// no budget reaches it; `bound` when the smallest budget already does (the
// curve says "at most this many", nothing finer).
struct BudgetReach {
  std::optional<double> tokens;
  bool bound = false;
};
inline BudgetReach budget_tokens_to_reach(const std::vector<double>& tokens, const std::vector<double>& losses,
                                          double target) {
  BudgetReach r;
  for (std::size_t i = 0; i < tokens.size() && i < losses.size(); ++i) {
    if (!std::isfinite(losses[i]) || losses[i] > target) continue;
    if (i == 0 || !std::isfinite(losses[i - 1])) {
      r.tokens = tokens[i];
      r.bound = i == 0;
      return r;
    }
    const double f = (losses[i - 1] - target) / (losses[i - 1] - losses[i]);
    r.tokens = std::exp(std::log(tokens[i - 1]) + f * (std::log(tokens[i]) - std::log(tokens[i - 1])));
    return r;
  }
  return r;
}

// ------------------------------------------------------------------ the learning-rate sweep
// One short run of the sweep: a variant at one learning rate (one seed).
struct SweepRun {
  std::string variant;
  double lr = 0;
  std::optional<double> final_val_loss;  // absent or NaN: diverged or never evaluated
};
struct SweepChoice {
  std::string variant;
  double lr = 0;
  double final_val_loss = detail::nan;
};

// Each variant's learning rate: the one with the lowest final validation loss
// in the sweep (ties: the smaller rate). A run whose loss is absent or not
// finite counts as diverged and is never chosen; a variant with no finite run,
// or none at all, is an error naming it.
inline std::vector<SweepChoice> choose_learning_rates(const std::vector<std::string>& variants,
                                                     const std::vector<SweepRun>& runs) {
  std::vector<SweepChoice> out;
  for (const auto& v : variants) {
    SweepChoice best{v, 0, detail::nan};
    bool any = false, found = false;
    for (const auto& r : runs) {
      if (r.variant != v) continue;
      any = true;
      if (!r.final_val_loss || !std::isfinite(*r.final_val_loss)) continue;
      const double l = *r.final_val_loss;
      if (!found || l < best.final_val_loss || (l == best.final_val_loss && r.lr < best.lr)) {
        best.lr = r.lr;
        best.final_val_loss = l;
        found = true;
      }
    }
    if (!any) throw Error("lr sweep: no sweep run of variant \"" + v + "\"");
    if (!found)
      throw Error("lr sweep: every learning rate of variant \"" + v +
                  "\" diverged (no finite final validation loss); widen --lr-grid towards smaller rates");
    out.push_back(best);
  }
  return out;
}

// Where a variant's sweep goes next: when its best rate is the smallest or the
// largest rate it tried (a diverged rate counts as tried, so a winner below a
// diverged rate is interior), the rate `factor` times further out; nullopt when
// the winner is interior. An optimum on a grid's edge may lie past it.
inline std::optional<double> next_grid_rate(const std::string& variant, const std::vector<SweepRun>& runs,
                                            double factor = 3.0) {
  const SweepChoice best = choose_learning_rates({variant}, runs).front();
  double lo = best.lr, hi = best.lr;
  for (const auto& r : runs)
    if (r.variant == variant) {
      lo = std::min(lo, r.lr);
      hi = std::max(hi, r.lr);
    }
  if (lo == hi) return best.lr * factor;  // one rate: no interior yet; larger first
  if (best.lr == lo) return best.lr / factor;
  if (best.lr == hi) return best.lr * factor;
  return std::nullopt;
}

// How far a variant's timing rounds disagree: (slowest − fastest) / median.
// Above 10%, the machine was not quiet enough for a time-to-target to mean much.
inline constexpr double kNoisyTimingSpread = 0.10;
inline double round_spread(std::vector<double> ts) {
  if (ts.size() < 2) return 0.0;
  std::sort(ts.begin(), ts.end());
  const std::size_t n = ts.size();
  const double median = n % 2 ? ts[n / 2] : 0.5 * (ts[n / 2 - 1] + ts[n / 2]);
  return median > 0 ? (ts.back() - ts.front()) / median : 0.0;
}

// A variant's best two converged rates, best first (ties: the smaller rate):
// the pair the full-horizon re-check runs again. Fewer when fewer converged.
inline std::vector<double> best_two_rates(const std::string& variant, const std::vector<SweepRun>& runs) {
  std::vector<std::pair<double, double>> ok;  // (loss, lr)
  for (const auto& r : runs)
    if (r.variant == variant && r.final_val_loss && std::isfinite(*r.final_val_loss)) ok.emplace_back(*r.final_val_loss, r.lr);
  std::sort(ok.begin(), ok.end());
  std::vector<double> out;
  for (std::size_t i = 0; i < ok.size() && i < 2; ++i) out.push_back(ok[i].second);
  return out;
}

// The losses at the rates on either side of a variant's chosen one (absent:
// none tried there; NaN: diverged), for the report: an interior optimum shows
// higher losses on both sides.
struct Neighbours {
  std::optional<double> below_lr, above_lr;
  std::optional<double> below_loss, above_loss;
};
inline Neighbours neighbours_of(const SweepChoice& c, const std::vector<SweepRun>& runs) {
  Neighbours n;
  for (const auto& r : runs) {
    if (r.variant != c.variant) continue;
    const double loss = r.final_val_loss && std::isfinite(*r.final_val_loss) ? *r.final_val_loss : detail::nan;
    if (r.lr < c.lr && (!n.below_lr || r.lr > *n.below_lr)) {
      n.below_lr = r.lr;
      n.below_loss = loss;
    }
    if (r.lr > c.lr && (!n.above_lr || r.lr < *n.above_lr)) {
      n.above_lr = r.lr;
      n.above_loss = loss;
    }
  }
  return n;
}

// The sweep as a markdown table: one row per variant, one column per rate
// (the grid and any rate an extension added), the chosen rate's loss in bold,
// "diverged" where a run has no finite loss, and the chosen rate's neighbours.
inline std::string sweep_markdown(const std::vector<std::string>& variants, const std::vector<double>& grid,
                                  const std::vector<SweepRun>& runs, const std::vector<SweepChoice>& chosen,
                                  std::int64_t sweep_steps, std::int64_t seed) {
  std::set<double> rates(grid.begin(), grid.end());
  for (const auto& r : runs) rates.insert(r.lr);
  std::ostringstream os;
  os << "Each variant trained for " << sweep_steps << " steps (seed " << seed << ") at every rate of the grid (";
  for (auto it = grid.begin(); it != grid.end(); ++it) os << (it == grid.begin() ? "" : ", ") << detail::fmt("%g", *it);
  os << "), with the study's other flags; a variant whose best rate sat on the edge of the rates it had tried was "
        "swept one rate further (x3 or /3) until the best was interior or the extensions ran out. The rate with the "
        "lowest final validation loss (bold) is the sweep's choice (ties: the smaller rate).\n\n";
  os << "| variant |";
  for (double g : rates) os << " lr " << detail::fmt("%g", g) << (std::count(grid.begin(), grid.end(), g) ? "" : " (ext.)") << " |";
  os << " chosen lr | neighbours' losses (below / above) |\n|---|";
  for (std::size_t i = 0; i < rates.size(); ++i) os << "---|";
  os << "---|---|\n";
  auto loss_cell = [](const std::optional<double>& l) {
    return !l ? std::string("none tried") : std::isfinite(*l) ? detail::fmt("%.4f", *l) : std::string("diverged");
  };
  for (const auto& v : variants) {
    const SweepChoice* c = nullptr;
    for (const auto& x : chosen)
      if (x.variant == v) c = &x;
    os << "| " << detail::md_cell(v) << " |";
    for (double g : rates) {
      const SweepRun* r = nullptr;
      for (const auto& x : runs)
        if (x.variant == v && x.lr == g) r = &x;
      std::string cell = "not run";
      if (r) cell = (r->final_val_loss && std::isfinite(*r->final_val_loss)) ? detail::fmt("%.4f", *r->final_val_loss)
                                                                              : "diverged";
      if (r && c && c->lr == g) cell = "**" + cell + "**";
      os << " " << cell << " |";
    }
    std::string nb = "n/a";
    if (c) {
      const Neighbours n = neighbours_of(*c, runs);
      nb = loss_cell(n.below_loss) + " / " + loss_cell(n.above_loss);
      if (!n.below_lr || !n.above_lr) nb += " (on the edge)";
    }
    os << " " << (c ? detail::fmt("%g", c->lr) : std::string("n/a")) << " | " << nb << " |\n";
  }
  return os.str();
}

}  // namespace normlab::ablate
