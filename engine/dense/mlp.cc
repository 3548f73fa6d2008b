#include "engine/dense/mlp.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/dense/linear.h"

namespace dlrm {

template <typename T>
Mlp<T>::Mlp(int in_dim, std::vector<int> layer_sizes, bool relu_last, size_t param_offset,
            GemmPrecision precision)
    : in_dim_(in_dim),
      sizes_(std::move(layer_sizes)),
      relu_last_(relu_last),
      param_offset_(param_offset),
      precision_(precision) {
  if (in_dim_ <= 0) ThrowInvalid("Mlp: in_dim must be > 0, got ", in_dim_);
  if (sizes_.empty()) ThrowInvalid("Mlp: layer_sizes must not be empty");
  for (size_t l = 0; l < sizes_.size(); ++l) {
    if (sizes_[l] <= 0) ThrowInvalid("Mlp: layer_sizes[", l, "] must be > 0, got ", sizes_[l]);
  }
}

template <typename T>
int Mlp<T>::out_dim() const {
  return sizes_.back();
}

template <typename T>
int Mlp<T>::layer_in(int l) const {
  return l == 0 ? in_dim_ : sizes_[l - 1];
}

template <typename T>
size_t Mlp<T>::num_params() const {
  return weight_offset(num_layers()) - param_offset_;
}

// Offset of layer l's weight; l == num_layers() gives the end of this MLP's range.
template <typename T>
size_t Mlp<T>::weight_offset(int l) const {
  size_t offset = param_offset_;
  for (int k = 0; k < l; ++k) {
    offset += static_cast<size_t>(layer_out(k)) * (static_cast<size_t>(layer_in(k)) + 1);
  }
  return offset;
}

template <typename T>
size_t Mlp<T>::bias_offset(int l) const {
  return weight_offset(l) + static_cast<size_t>(layer_out(l)) * layer_in(l);
}

template <typename T>
size_t Mlp<T>::activations_per_row() const {
  size_t total = 0;
  for (int s : sizes_) total += static_cast<size_t>(s);
  return total;
}

// Two ping-pong gradient buffers, each as wide as the widest layer: one holds the
// gradient w.r.t. a layer's output while the next layer's input gradient is written.
template <typename T>
size_t Mlp<T>::scratch_per_row() const {
  return 2 * static_cast<size_t>(*std::max_element(sizes_.begin(), sizes_.end()));
}

template <typename T>
void Mlp<T>::Initialize(T* params, uint64_t seed, uint64_t stream_base) const {
  auto fill_normal = [&](T* dst, size_t count, double stddev, uint64_t tensor) {
    const CounterRng rng(seed, kStreamDenseBase + stream_base + tensor, 0);
    for (size_t j = 0; j < count; ++j) dst[j] = static_cast<T>(stddev * rng.Normal(j));
  };
  for (int l = 0; l < num_layers(); ++l) {
    const int in = layer_in(l), out = layer_out(l);
    const uint64_t k = 2 * static_cast<uint64_t>(l);
    fill_normal(params + weight_offset(l), static_cast<size_t>(out) * in,
                std::sqrt(2.0 / (in + out)), k);
    fill_normal(params + bias_offset(l), static_cast<size_t>(out), std::sqrt(1.0 / out), k + 1);
  }
}

template <typename T>
Activation Mlp<T>::activation(int l) const {
  return l + 1 < num_layers() || relu_last_ ? Activation::kRelu : Activation::kNone;
}

template <typename T>
const T* Mlp<T>::Forward(const T* params, const T* x, int64_t n, T* acts,
                         GemmPackCache* weights) const {
  const T* input = x;
  T* out = acts;
  for (int l = 0; l < num_layers(); ++l) {
    const int in_w = layer_in(l), out_w = layer_out(l);
    LinearForward(input, n, in_w, out_w, params + weight_offset(l), params + bias_offset(l),
                  activation(l), out, precision_, weights);
    input = out;
    out += n * out_w;
  }
  return input;
}

template <typename T>
void Mlp<T>::Backward(const T* params, const T* x, const T* acts, const T* dy, int64_t n, T* grads,
                      T* dx, T* scratch, GemmPackCache* weights) const {
  const int last = num_layers() - 1;
  T* const buffers[2] = {scratch, scratch + n * (scratch_per_row() / 2)};
  // Start of layer l's activation block: n times the widths of the layers before it.
  auto acts_block = [&](int l) {
    int64_t offset = 0;
    for (int k = 0; k < l; ++k) offset += n * layer_out(k);
    return acts + offset;
  };

  // Each layer's backward turns its output gradient into the pre-activation gradient in
  // place; dy is const, so it starts as a copy.
  T* grad_out = buffers[0];
  std::copy(dy, dy + n * layer_out(last), grad_out);
  for (int l = last; l >= 0; --l) {
    const int in_w = layer_in(l), out_w = layer_out(l);
    const T* input = l == 0 ? x : acts_block(l - 1);
    T* grad_in = l == 0 ? dx : (grad_out == buffers[0] ? buffers[1] : buffers[0]);
    LinearBackward(input, acts_block(l), grad_out, n, in_w, out_w, params + weight_offset(l),
                   activation(l), grad_in, grads + weight_offset(l), grads + bias_offset(l),
                   precision_, weights);
    grad_out = grad_in;
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace dlrm
