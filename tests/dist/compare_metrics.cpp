// compare_metrics A/metrics.jsonl B/metrics.jsonl TOL FIELD...
// Two runs' per-step metrics must have the same steps and, for every FIELD
// present on a step, |a - b| <= TOL (TOL ending in "r": relative,
// |a - b| <= TOL·max(|a|, |b|)). Prints the largest difference per field;
// exit 0 when within TOL, 1 when not, 2 on unreadable input.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {
std::map<long long, nlohmann::json> read_steps(const char* path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string("cannot read ") + path);
  std::map<long long, nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step") && j.contains("train_loss")) out[j["step"].get<long long>()] = j;
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: compare_metrics A.jsonl B.jsonl TOL FIELD...\n");
    return 2;
  }
  try {
    const auto a = read_steps(argv[1]), b = read_steps(argv[2]);
    std::string tol_s = argv[3];
    const bool relative = !tol_s.empty() && tol_s.back() == 'r';
    if (relative) tol_s.pop_back();
    const double tol = std::stod(tol_s);
    bool ok = true;
    if (a.size() != b.size() || a.empty()) {
      std::printf("compare_metrics: %zu steps in %s, %zu in %s\n", a.size(), argv[1], b.size(), argv[2]);
      return 1;
    }
    for (int f = 4; f < argc; ++f) {
      const std::string field = argv[f];
      double worst = 0;
      long long worst_step = 0, compared = 0, nans = 0;
      for (const auto& [step, ja] : a) {
        const auto it = b.find(step);
        if (it == b.end()) {
          std::printf("compare_metrics: step %lld is missing from %s\n", step, argv[2]);
          return 1;
        }
        const bool in_a = ja.contains(field), in_b = it->second.contains(field);
        if (in_a != in_b) {
          std::printf("compare_metrics: %s at step %lld is in only one of the runs\n", field.c_str(), step);
          return 1;
        }
        if (!in_a) continue;
        const double x = ja[field].get<double>(), y = it->second[field].get<double>();
        const double scale = relative ? std::max(std::fabs(x), std::fabs(y)) : 1.0;
        const double d = std::fabs(x - y) / (scale > 0 ? scale : 1.0);
        ++compared;
        if (std::isnan(d)) {
          ++nans;  // a NaN on either side never passes
          worst_step = step;
        } else if (d > worst) {
          worst = d, worst_step = step;
        }
      }
      const bool field_ok = compared > 0 && nans == 0 && worst <= tol;
      if (nans) std::printf("compare_metrics: %s is NaN in %lld steps\n", field.c_str(), nans);
      std::printf("compare_metrics: %-10s %lld steps, largest %s %.3e (step %lld), tolerance %.1e: %s\n",
                  field.c_str(), compared, relative ? "relative |difference|" : "|difference|", worst, worst_step,
                  tol, field_ok ? "ok" : "FAILED");
      ok = ok && field_ok;
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_metrics: %s\n", e.what());
    return 2;
  }
}
