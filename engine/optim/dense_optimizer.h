// Optimizers for the dense (MLP) parameters, over the model's flat parameter vector.
// Updates follow PyTorch's torch.optim definitions (SGD with momentum/nesterov, Adagrad,
// Adam, AdamW) so that users can compare against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/dlrm.pb.h"

namespace dlrm {

template <typename T>
class DenseOptimizer {
 public:
  virtual ~DenseOptimizer() = default;
  // Updates params[begin, end) from the batch gradient grads[begin, end). lr is already
  // scheduled; step is the 1-based count of this update (Adam bias correction). Elements
  // are independent, so disjoint ranges may run concurrently.
  virtual void Update(T* params, const T* grads, size_t begin, size_t end, float lr,
                      int64_t step) = 0;
  // Whether Update with these arguments would leave every parameter and state value of
  // [begin, end) finite: the same arithmetic, nothing written (a step checks this for the
  // whole vector before it updates anything).
  virtual bool UpdateIsFinite(const T* params, const T* grads, size_t begin, size_t end, float lr,
                              int64_t step) const = 0;
  // Named state buffers, each num_params long ("momentum", "sum_sq", "exp_avg",
  // "exp_avg_sq"); empty for plain SGD. Checkpoints save and restore these.
  virtual std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers() = 0;
};

// SGD when config has no kind set.
template <typename T>
std::unique_ptr<DenseOptimizer<T>> MakeDenseOptimizer(const config::DenseOptimizerConfig& config,
                                                      size_t num_params);

}  // namespace dlrm
