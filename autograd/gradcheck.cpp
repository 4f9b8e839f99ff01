// gradcheck: analytic vector-Jacobian products against central differences.
#include "autograd/gradcheck.hpp"

#include <cmath>

#include "autograd/graph.hpp"
#include "autograd/random.hpp"

namespace xg {

namespace {

// <fn(inputs), u>: the scalar whose gradient is the vector-Jacobian product with u.
double project(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               const std::vector<double>& u) {
  Tensor y = fn(inputs);
  std::vector<double> v = y.to_vector();
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += v[i] * u[i];
  return s;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts) {
  std::vector<Tensor> wrt;
  std::vector<std::size_t> wrt_index;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined() || !inputs[k].requires_grad()) continue;
    check(inputs[k].dtype() == kFloat64, "gradcheck: input ", k, " is ", dtype_name(inputs[k].dtype()),
          "; central differences need float64 inputs");
    wrt.push_back(inputs[k]);
    wrt_index.push_back(k);
  }
  check(!wrt.empty(), "gradcheck: no input requires grad");

  Tensor y = fn(inputs);
  check(y.dtype() == kFloat64, "gradcheck: output is ", dtype_name(y.dtype()), ", expected float64");
  check(y.requires_grad(), "gradcheck: output does not require grad (is the op recorded?)");
  Generator gen(opts.seed);
  Tensor u = randn(y.shape(), kFloat64, &gen);
  const std::vector<double> uv = u.to_vector();
  std::vector<Tensor> analytic = grad({y}, wrt, {u}, false, true);

  GradcheckResult result;
  NoGradGuard no_grad;
  for (std::size_t w = 0; w < wrt.size(); ++w) {
    Tensor x = wrt[w];
    double* p = x.data<double>();
    const std::vector<double> a = analytic[w].defined() ? analytic[w].to_vector()
                                                        : std::vector<double>(static_cast<std::size_t>(x.numel()), 0.0);
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = p[j];
      p[j] = orig + opts.eps;
      const double fp = project(fn, inputs, uv);
      p[j] = orig - opts.eps;
      const double fm = project(fn, inputs, uv);
      p[j] = orig;
      const double numeric = (fp - fm) / (2 * opts.eps);
      const double diff = std::abs(a[j] - numeric);
      if (!(diff <= opts.atol + opts.rtol * std::abs(numeric))) {
        result.ok = false;
        result.message = str_cat("gradcheck: input ", wrt_index[w], " of shape ", shape_str(x.shape()),
                             ", flat index ", j, " (value ", orig, "): analytic ", a[j], ", numeric ", numeric,
                             ", diff ", diff, " > atol ", opts.atol, " + rtol ", opts.rtol, " * |numeric|");
        return result;
      }
    }
  }
  return result;
}

}  // namespace xg
