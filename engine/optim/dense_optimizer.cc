#include "engine/optim/dense_optimizer.h"

#include <cmath>

#include "engine/config/config.h"
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
    const bool use_momentum = !momentum_buf_.empty();
    for (size_t i = begin; i < end; ++i) {
      T g = grads[i];
      if (weight_decay_ != T(0)) g += weight_decay_ * params[i];
      if (use_momentum) {
        T& buf = momentum_buf_[i];
        buf = momentum_ * buf + g;
        g = nesterov_ ? g + momentum_ * buf : buf;
      }
      params[i] -= lr_t * g;
    }
  }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers() override {
    if (momentum_buf_.empty()) return {};
    return {{"momentum", &momentum_buf_}};
  }

 private:
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
    const T lr_t = static_cast<T>(lr);
    for (size_t i = begin; i < end; ++i) {
      T g = grads[i];
      if (weight_decay_ != T(0)) g += weight_decay_ * params[i];
      sum_sq_[i] += g * g;
      params[i] -= lr_t * g / (std::sqrt(sum_sq_[i]) + eps_);
    }
  }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers() override {
    return {{"sum_sq", &sum_sq_}};
  }

 private:
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
    // Per-step scalars in double: beta^t for large t must not lose the 1 - beta^t digits.
    const double t = static_cast<double>(step);
    const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1_), t);
    const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2_), t);
    const T step_size = static_cast<T>(lr / bias_correction1);
    const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    const T decay_factor = static_cast<T>(1.0 - static_cast<double>(lr) * weight_decay_);
    const bool l2 = weight_decay_ != T(0) && !decoupled_;
    const bool decoupled = weight_decay_ != T(0) && decoupled_;
    // Branch-free loops so that they vectorize (sqrt and division are correctly rounded
    // in SIMD too: the results are the scalar loop's bits). Decoupled decay first, as
    // the update below reads the decayed parameter.
    T* __restrict p = params;
    const T* __restrict gr = grads;
    T* __restrict m = exp_avg_.data();
    T* __restrict v = exp_avg_sq_.data();
    if (decoupled)
      for (size_t i = begin; i < end; ++i) p[i] *= decay_factor;
    const T wd = l2 ? weight_decay_ : T(0);
    const T b1 = beta1_, b2 = beta2_, eps = eps_;
    for (size_t i = begin; i < end; ++i) {
      const T g = l2 ? gr[i] + wd * p[i] : gr[i];
      m[i] = b1 * m[i] + (T(1) - b1) * g;
      v[i] = b2 * v[i] + (T(1) - b2) * g * g;
      const T denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
      p[i] -= step_size * m[i] / denom;
    }
  }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers() override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

 private:
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
