#include "engine/optim/dense_optimizer.h"

#include <cmath>
#include <type_traits>

#include "engine/config/config.h"
#include "engine/core/finite.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

// Guards the caller's side of the contract: a range past the state buffers would corrupt
// memory, and Adam's bias correction divides by zero at step 0.
void CheckUpdateArgs(size_t begin, size_t end, size_t num_params, int64_t step) {
  if (begin > end || end > num_params) {
    ThrowInvalid("DenseOptimizer::Update: range [", begin, ", ", end, ") is outside the ",
                 num_params, " parameters");
  }
  if (step < 1) ThrowInvalid("DenseOptimizer::Update: step must be >= 1, got ", step);
}

// Whether element(p, g, &state) and the state it leaves are finite for every i in
// [begin, end), each state copied from state[i] (0 when state is null): an optimizer with
// one state value per element checks its update this way, writing nothing.
template <typename T, typename Element>
bool EachFinite(const T* params, const T* grads, const T* state, size_t begin, size_t end,
                const Element& element) {
  FiniteCheck<T> check;
  for (size_t i = begin; i < end; ++i) {
    T s = state != nullptr ? state[i] : T(0);
    check.Add(element(params[i], grads[i], &s));
    check.Add(s);
  }
  return check.ok();
}

// torch.optim.SGD with dampening 0. The momentum buffer starts at zero, so the first step
// sets it to the gradient exactly as PyTorch's clone does.
template <typename T>
class Sgd final : public DenseOptimizer<T> {
 public:
  Sgd(const config::SgdConfig& c, size_t num_params)
      : num_params_(num_params),
        momentum_(c.momentum()),
        weight_decay_(c.weight_decay()),
        nesterov_(c.nesterov()),
        momentum_buf_(c.momentum() != 0.0f ? num_params : 0, T(0)) {}

  void Update(T* params, const T* grads, size_t begin, size_t end, float lr,
              int64_t step) override {
    CheckUpdateArgs(begin, end, num_params_, step);
    const T lr_t = static_cast<T>(lr);
    for (size_t i = begin; i < end; ++i) {
      T buf = momentum_buf_.empty() ? T(0) : momentum_buf_[i];
      params[i] = Element(params[i], grads[i], lr_t, &buf);
      if (!momentum_buf_.empty()) momentum_buf_[i] = buf;
    }
  }

  bool UpdateIsFinite(const T* params, const T* grads, size_t begin, size_t end, float lr,
                      int64_t step) const override {
    CheckUpdateArgs(begin, end, num_params_, step);
    const T lr_t = static_cast<T>(lr);
    return EachFinite(params, grads, momentum_buf_.empty() ? nullptr : momentum_buf_.data(), begin,
                      end, [&](T p, T g, T* buf) { return Element(p, g, lr_t, buf); });
  }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers() override {
    if (momentum_buf_.empty()) return {};
    return {{"momentum", &momentum_buf_}};
  }

 private:
  // One element's new value; *buf: its momentum, updated (unused without momentum).
  T Element(T p, T g, T lr_t, T* buf) const {
    if (weight_decay_ != T(0)) g += weight_decay_ * p;
    if (!momentum_buf_.empty()) {
      *buf = momentum_ * *buf + g;
      g = nesterov_ ? g + momentum_ * *buf : *buf;
    }
    return p - lr_t * g;
  }

  size_t num_params_;
  T momentum_, weight_decay_;
  bool nesterov_;
  std::vector<T> momentum_buf_;
};

// torch.optim.Adagrad with lr_decay 0.
template <typename T>
class Adagrad final : public DenseOptimizer<T> {
 public:
  Adagrad(const config::AdagradConfig& c, size_t num_params)
      : num_params_(num_params),
        eps_(c.eps()),
        weight_decay_(c.weight_decay()),
        sum_sq_(num_params, static_cast<T>(c.initial_accumulator())) {}

  void Update(T* params, const T* grads, size_t begin, size_t end, float lr,
              int64_t step) override {
    CheckUpdateArgs(begin, end, num_params_, step);
    const Scalars c{static_cast<T>(lr), eps_, weight_decay_};
    WithDecay(c, [&](auto decay) {
      UpdateRange<decltype(decay)::value>(c, params, grads, sum_sq_.data(), begin, end);
    });
  }

  bool UpdateIsFinite(const T* params, const T* grads, size_t begin, size_t end, float lr,
                      int64_t step) const override {
    CheckUpdateArgs(begin, end, num_params_, step);
    const Scalars c{static_cast<T>(lr), eps_, weight_decay_};
    return WithDecay(c, [&](auto decay) {
      return EachFinite(params, grads, sum_sq_.data(), begin, end, [&](T p, T g, T* sum_sq) {
        return Element<decltype(decay)::value>(c, p, g, sum_sq);
      });
    });
  }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers() override {
    return {{"sum_sq", &sum_sq_}};
  }

 private:
  // A step's scalars, copied out of the object so that the loops keep them in registers.
  struct Scalars {
    T lr, eps, decay;
  };
  // fn(std::bool_constant<c.decay != 0>{}): the decay's branch taken once, outside the
  // loops, so that they vectorize (as Adam's).
  template <typename Fn>
  static auto WithDecay(const Scalars& c, Fn&& fn) {
    return c.decay != T(0) ? fn(std::true_type{}) : fn(std::false_type{});
  }
  // One element's new value; *sum_sq: its accumulator, updated. kDecay: c.decay != 0.
  template <bool kDecay>
  static T Element(const Scalars& c, T p, T g, T* sum_sq) {
    if (kDecay) g += c.decay * p;
    *sum_sq += g * g;
    return p - c.lr * g / (std::sqrt(*sum_sq) + c.eps);
  }
  // Non-aliasing pointers, so that the loop vectorizes: sqrt and division are correctly
  // rounded in SIMD too, so the bits are the scalar loop's. Scalar, the divide-and-sqrt
  // chain was 3% of MLPerf DCNv2's step.
  template <bool kDecay>
  static void UpdateRange(const Scalars& c, T* __restrict p, const T* __restrict grads,
                          T* __restrict sum_sq, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) p[i] = Element<kDecay>(c, p[i], grads[i], &sum_sq[i]);
  }

  size_t num_params_;
  T eps_, weight_decay_;
  std::vector<T> sum_sq_;
};

// torch.optim.Adam (decoupled_weight_decay = false) and torch.optim.AdamW (true).
template <typename T>
class Adam final : public DenseOptimizer<T> {
 public:
  Adam(const config::AdamConfig& c, size_t num_params)
      : num_params_(num_params),
        beta1_(c.beta1()),
        beta2_(c.beta2()),
        eps_(c.eps()),
        weight_decay_(c.weight_decay()),
        decoupled_(c.decoupled_weight_decay()),
        exp_avg_(num_params, T(0)),
        exp_avg_sq_(num_params, T(0)) {}

  void Update(T* params, const T* grads, size_t begin, size_t end, float lr,
              int64_t step) override {
    CheckUpdateArgs(begin, end, num_params_, step);
    const Scalars c = ScalarsFor(lr, step);
    // Branch-free (the branches on c are loop-invariant) so that it vectorizes: sqrt and
    // division are correctly rounded in SIMD too, the scalar loop's bits.
    T* __restrict p = params;
    const T* __restrict gr = grads;
    T* __restrict m = exp_avg_.data();
    T* __restrict v = exp_avg_sq_.data();
    for (size_t i = begin; i < end; ++i) p[i] = Element(c, p[i], gr[i], &m[i], &v[i]);
  }

  bool UpdateIsFinite(const T* params, const T* grads, size_t begin, size_t end, float lr,
                      int64_t step) const override {
    CheckUpdateArgs(begin, end, num_params_, step);
    const Scalars c = ScalarsFor(lr, step);
    FiniteCheck<T> check;
    for (size_t i = begin; i < end; ++i) {
      T m = exp_avg_[i], v = exp_avg_sq_[i];
      check.Add(Element(c, params[i], grads[i], &m, &v));
      check.Add(m);
      check.Add(v);
    }
    return check.ok();
  }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers() override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

 private:
  // A step's scalars.
  struct Scalars {
    T step_size, bias_correction2_sqrt, decay_factor, l2_decay;
    bool decoupled;
  };
  Scalars ScalarsFor(float lr, int64_t step) const {
    // In double: beta^t for large t must not lose the 1 - beta^t digits.
    const double t = static_cast<double>(step);
    const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1_), t);
    const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2_), t);
    Scalars c;
    c.step_size = static_cast<T>(lr / bias_correction1);
    c.bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    c.decay_factor = static_cast<T>(1.0 - static_cast<double>(lr) * weight_decay_);
    c.decoupled = weight_decay_ != T(0) && decoupled_;
    c.l2_decay = weight_decay_ != T(0) && !decoupled_ ? weight_decay_ : T(0);
    return c;
  }
  // One element's new value; *m, *v: its moments, updated. Decoupled decay first, as the
  // update reads the decayed parameter.
  T Element(const Scalars& c, T p, T g, T* m, T* v) const {
    if (c.decoupled) p *= c.decay_factor;
    if (c.l2_decay != T(0)) g += c.l2_decay * p;
    *m = beta1_ * *m + (T(1) - beta1_) * g;
    *v = beta2_ * *v + (T(1) - beta2_) * g * g;
    const T denom = std::sqrt(*v) / c.bias_correction2_sqrt + eps_;
    return p - c.step_size * *m / denom;
  }

  size_t num_params_;
  T beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::vector<T> exp_avg_, exp_avg_sq_;
};

void ValidateSgd(const config::SgdConfig& c) {
  RequireNonNegative("dense_optimizer.sgd.momentum", c.momentum());
  RequireNonNegative("dense_optimizer.sgd.weight_decay", c.weight_decay());
  if (c.nesterov() && c.momentum() == 0.0f) {
    ThrowInvalid("dense_optimizer.sgd.nesterov requires sgd.momentum > 0, got ", c.momentum());
  }
}

void ValidateAdagrad(const config::AdagradConfig& c) {
  RequirePositive("dense_optimizer.adagrad.eps", c.eps());
  RequireNonNegative("dense_optimizer.adagrad.initial_accumulator", c.initial_accumulator());
  RequireNonNegative("dense_optimizer.adagrad.weight_decay", c.weight_decay());
}

void ValidateAdam(const config::AdamConfig& c) {
  RequireUnitInterval("dense_optimizer.adam.beta1", c.beta1());
  RequireUnitInterval("dense_optimizer.adam.beta2", c.beta2());
  RequirePositive("dense_optimizer.adam.eps", c.eps());
  RequireNonNegative("dense_optimizer.adam.weight_decay", c.weight_decay());
}

}  // namespace

template <typename T>
std::unique_ptr<DenseOptimizer<T>> MakeDenseOptimizer(const config::DenseOptimizerConfig& config,
                                                      size_t num_params) {
  RequireNonNegative("dense_optimizer.learning_rate", config.learning_rate());
  switch (config.kind_case()) {
    case config::DenseOptimizerConfig::kAdagrad:
      ValidateAdagrad(config.adagrad());
      return std::make_unique<Adagrad<T>>(config.adagrad(), num_params);
    case config::DenseOptimizerConfig::kAdam:
      ValidateAdam(config.adam());
      return std::make_unique<Adam<T>>(config.adam(), num_params);
    case config::DenseOptimizerConfig::kSgd:
    case config::DenseOptimizerConfig::KIND_NOT_SET: break;
  }
  // config.sgd() is the all-defaults message when no kind is set: plain SGD.
  ValidateSgd(config.sgd());
  return std::make_unique<Sgd<T>>(config.sgd(), num_params);
}

template std::unique_ptr<DenseOptimizer<float>> MakeDenseOptimizer<float>(
    const config::DenseOptimizerConfig&, size_t);
template std::unique_ptr<DenseOptimizer<double>> MakeDenseOptimizer<double>(
    const config::DenseOptimizerConfig&, size_t);

}  // namespace dlrm
