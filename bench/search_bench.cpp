// tjob-search-bench ALGORITHM SEEDS BUDGET: how good a sweep's algorithm is,
// not how fast: the best objective each seed's sweep finds within BUDGET
// trials on two standard test functions, the median over SEEDS seeds, as one
// JSON object. The trials are the functions evaluated here (the algorithm
// is what differs between random and tpe; a trial's job costs the same).
//   branin: Branin-Hoo on [-5, 10] x [0, 15]; its minimum is 0.397887.
//   noisy_quadratic: sum of (x_i - 0.3)^2 over 4 dimensions of [-1, 1], with
//     Gaussian noise (sd 0.01) on every evaluation; the best is reported by
//     its true value.
#include "core/sweep_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

using tjob::search_parameter;
using dist = search_parameter::distribution;

double branin(const std::vector<double>& v) {
  const double x = v[0], y = v[1];
  const double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
  return std::pow(y - b * x * x + c * x - 6, 2) + 10 * (1 - t) * std::cos(x) + 10;
}

double quadratic(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += (x - 0.3) * (x - 0.3);
  return s;
}

double run(const std::string& algorithm, const std::string& function, std::uint64_t seed, int budget) {
  tjob::sweep_request r;
  r.algorithm = algorithm;
  r.num_trials = budget;
  const bool is_branin = function == "branin";
  if (is_branin) {
    r.search_space.push_back({"x", dist::uniform, -5, 10, {}});
    r.search_space.push_back({"y", dist::uniform, 0, 15, {}});
  } else {
    for (int i = 0; i < 4; ++i) r.search_space.push_back({"x" + std::to_string(i), dist::uniform, -1, 1, {}});
  }
  std::mt19937_64 noise(seed * 7919);
  std::normal_distribution<double> gauss(0, 0.01);
  std::vector<tjob::detail::observation> done;
  double best = INFINITY;
  for (int i = 0; i < budget; ++i) {
    auto p = tjob::detail::sweep_parameters(r, seed, i, done);
    std::vector<double> v;
    for (const auto& [k, x] : p) v.push_back(std::stod(x));
    const double truth = is_branin ? branin(v) : quadratic(v);
    best = std::min(best, truth);
    done.push_back({p, is_branin ? truth : truth + gauss(noise)});
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tjob-search-bench random|tpe|grid SEEDS BUDGET\n");
    return 2;
  }
  const std::string algorithm = argv[1];
  const int seeds = std::stoi(argv[2]), budget = std::stoi(argv[3]);
  std::printf("{");
  const char* sep = "";
  for (const char* f : {"branin", "noisy_quadratic"}) {
    std::vector<double> best;
    for (int s = 1; s <= seeds; ++s) best.push_back(run(algorithm, f, static_cast<std::uint64_t>(s), budget));
    std::printf("%s\"%s_best\":%.6g", sep, f, median(best));
    sep = ",";
  }
  std::printf("}\n");
  return 0;
}
