// The 8 test ops' backward formulas in C++: as they were written around PyTorch 1.10/1.11 (in
// place), and as core has them today out of place (the modern ones, run by cpp_handfixed).
//
// Each legacy body is the historical C++ of the file and function named above it (the Python
// transcriptions in lib/funcbwd_lab/ops/discussion/ cite the same lines and the PR that fixed
// each one). The modern bodies are the out-of-place branches core takes for a subclass-like
// argument today (the Python handfixed formulas, written in C++).
#pragma once
#include <ATen/ATen.h>

#include <array>
#include <optional>
#include <tuple>

namespace funcbwd_cpp {
using at::IntArrayRef;
using at::Tensor;
using OptTensor = std::optional<Tensor>;
using Tensor3 = std::tuple<Tensor, Tensor, Tensor>;

namespace legacy {

// aten/src/ATen/native/TensorShape.cpp diag_backward (pytorch#87180 made diag composite).
inline Tensor diag_backward(const Tensor& grad, IntArrayRef input_sizes, int64_t diagonal) {
  auto ndimension = input_sizes.size();
  TORCH_CHECK(ndimension == 1 || ndimension == 2, "diag_backward: 1-D or 2-D input");
  if (ndimension == 1 || input_sizes[0] == input_sizes[1]) {
    return grad.diag(diagonal);
  }
  // Input was a matrix but was not square
  auto grad_input = at::zeros(input_sizes, grad.options());
  auto diag = grad_input.diagonal(diagonal);
  diag.copy_(grad);
  return grad_input;
}

// aten/src/ATen/native/TensorAdvancedIndexing.cpp index_select_backward (pytorch#77578).
inline Tensor index_select_backward(const Tensor& grad, IntArrayRef self_sizes, int64_t dim,
                                    const Tensor& index) {
  return at::zeros(self_sizes, grad.options()).index_add_(dim, index, grad);
}

// aten/src/ATen/native/ReduceOps.cpp value_selecting_reduction_backward: topk, sort, mode
// (functorch f7ad909b; pytorch#76731).
inline Tensor value_selecting_reduction_backward(const Tensor& grad, int64_t dim,
                                                 const Tensor& indices, IntArrayRef sizes,
                                                 bool keepdim) {
  if (!keepdim && sizes.size() > 0) {
    auto grad_ = grad.unsqueeze(dim);
    auto indices_ = indices.unsqueeze(dim);
    return at::zeros(sizes, grad_.options()).scatter_(dim, indices_, grad_);
  }
  return at::zeros(sizes, grad.options()).scatter_(dim, indices, grad);
}

// aten/src/ATen/native/TensorAdvancedIndexing.cpp masked_select_backward (pytorch#76794). The
// engine reduces the broadcast result to the input's shape (validate_outputs' sum_to).
inline Tensor masked_select_backward(const Tensor& grad, const Tensor& input, const Tensor& mask) {
  // The following could just be written as `zeros_like(input).masked_scatter(mask, grad)`.
  // However, as an optimization, we call the in-place variant of masked_scatter.
  // Unfortunately, that doesn't allow for the broadcasting of the LHS, so we need
  // to explicitly broadcast here (the out-of-place variant of masked_scatter
  // implicitly handles broadcasting).
  auto result = at::zeros_like(input.expand(at::infer_size(input.sizes(), mask.sizes())),
                               at::MemoryFormat::Preserve);
  return result.masked_scatter_(mask, grad);
}

// torch/csrc/autograd/FunctionsManual.cpp clamp_backward, Tensor overload (pytorch#69534).
inline Tensor clamp_backward(const Tensor& grad, const Tensor& self, const OptTensor& min,
                             const OptTensor& max) {
  // clamp: gradients not defined on min and max, so we return the subgradient 1 for these cases.
  if (max && min) {
    auto zero = at::scalar_tensor(0., grad.options());
    return where((self >= *min).logical_and_(self <= *max), grad, zero);
  } else if (min) {
    auto zero = at::scalar_tensor(0., grad.options());
    return where(self >= *min, grad, zero);
  } else if (max) {
    auto zero = at::scalar_tensor(0., grad.options());
    return where(self <= *max, grad, zero);
  }
  return grad;
}

// FunctionsManual.cpp clamp_backward_min_max (the in-place lines as lib/funcbwd_lab/ops/
// discussion/clamp.py reconstructs them; functorch#247 shows the logical_or_ error).
inline std::tuple<Tensor, Tensor> clamp_backward_min_max(const Tensor& grad, const Tensor& self,
                                                         const Tensor& min, const Tensor& max,
                                                         const std::array<bool, 2>& mask) {
  // If min > max, min has no gradient
  std::tuple<Tensor, Tensor> ret;
  if (!grad.defined()) {
    return ret;
  }
  auto zero = at::scalar_tensor(0., grad.options());
  if (max.defined() && min.defined()) {
    if (mask[0]) {
      const auto self_lt_min = self < min;
      const auto min_lt_max = min < max;
      std::get<0>(ret) = where(self_lt_min.logical_and_(min_lt_max), grad, zero);
    }
    if (mask[1]) {
      const auto self_gt_max = self > max;
      const auto max_lt_min = max < min;
      std::get<1>(ret) = where(self_gt_max.logical_or_(max_lt_min), grad, zero);
    }
  }
  return ret;
}

// FunctionsManual.cpp prod_safe_zeros_backward: exclusive cumprods from both ends.
inline Tensor prod_safe_zeros_backward(const Tensor& grad, const Tensor& inp, int64_t dim) {
  if (inp.numel() == 0) {
    // When input is empty, the gradient is also empty
    return grad.expand_as(inp);
  }
  auto ones_size = inp.sizes().vec();
  ones_size[dim] = 1;
  Tensor ones = at::ones(ones_size, grad.options());
  Tensor exclusive_normal_nocp = at::cat({ones, inp.narrow(dim, 0, inp.size(dim) - 1)}, dim);
  Tensor exclusive_normal = exclusive_normal_nocp.cumprod(dim);
  Tensor narrow_reverse = inp.narrow(dim, 1, inp.size(dim) - 1).flip(dim);
  Tensor exclusive_reverse_nocp = at::cat({ones, narrow_reverse}, dim);
  Tensor exclusive_reverse = exclusive_reverse_nocp.cumprod(dim).flip(dim);
  return grad * (exclusive_normal * exclusive_reverse).conj();
}

// FunctionsManual.cpp prod_backward, full reduction (pytorch#81969): no in-place op, but
// nonzero() and its row count pick the path (a negative control).
inline Tensor prod_backward(const Tensor& grad, const Tensor& input, const Tensor& result) {
  if (input.dim() == 0) {
    return grad;
  }
  Tensor zero_idx = (input == 0).nonzero();
  if (zero_idx.numel() == 0) {
    return grad * (result / input).conj();
  } else if (zero_idx.size(0) > 1) {
    return at::zeros_like(input, at::MemoryFormat::Contiguous);
  } else {
    return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input);
  }
}

// FunctionsManual.cpp prod_backward, reduction over a dim: .item() picks the path.
inline Tensor prod_backward(Tensor grad, const Tensor& input, Tensor result, int64_t dim,
                            bool keepdim) {
  if (input.dim() == 0) {
    return grad;
  }
  dim = at::maybe_wrap_dim(dim, static_cast<int64_t>(input.sizes().size()));
  if (!keepdim && input.dim() != 1) {
    grad = grad.unsqueeze(dim);
    result = result.unsqueeze(dim);
  }
  Tensor zero_mask = (input == 0);
  Tensor slice_zero_count = zero_mask.sum(dim, true);
  int64_t total_zeros = slice_zero_count.sum().item<int64_t>();
  if (total_zeros == 0) {
    return grad * (result / input).conj();
  } else {
    return prod_safe_zeros_backward(grad, input, dim);
  }
}

}  // namespace legacy

namespace modern {

// torch/_decomp/decompositions.py diagonal_backward: diagonal_scatter into grad.new_zeros.
inline Tensor diag_backward(const Tensor& grad, IntArrayRef input_sizes, int64_t diagonal) {
  if (input_sizes.size() == 1) {
    return grad.diagonal(diagonal, -2, -1);
  }
  return at::diagonal_scatter(grad.new_zeros(input_sizes), grad, diagonal, 0, 1);
}

// index_select_backward_symint's subclass-like branch (pytorch#77578).
inline Tensor index_select_backward(const Tensor& grad, IntArrayRef self_sizes, int64_t dim,
                                    const Tensor& index) {
  return grad.new_zeros(self_sizes).index_add(dim, index, grad);
}

// value_selecting_reduction_backward_symint's subclass-like branch (pytorch#76731).
inline Tensor value_selecting_reduction_backward(const Tensor& grad, int64_t dim,
                                                 const Tensor& indices, IntArrayRef sizes,
                                                 bool keepdim) {
  if (!keepdim && sizes.size() > 0) {
    return at::zeros(sizes, grad.options()).scatter(dim, indices.unsqueeze(dim), grad.unsqueeze(dim));
  }
  return at::zeros(sizes, grad.options()).scatter(dim, indices, grad);
}

// masked_select_backward's subclass-like branch (pytorch#76794).
inline Tensor masked_select_backward(const Tensor& grad, const Tensor& input, const Tensor& mask) {
  auto result = at::zeros_like(input.expand(at::infer_size(input.sizes(), mask.sizes())),
                               at::MemoryFormat::Preserve);
  return result.masked_scatter(mask, grad);
}

// clamp_backward / clamp_backward_min_max's subclass-like branches (pytorch#69534).
inline Tensor clamp_backward(const Tensor& grad, const Tensor& self, const OptTensor& min,
                             const OptTensor& max) {
  auto zero = at::scalar_tensor(0., grad.options());
  if (max && min) {
    return where((self >= *min).logical_and(self <= *max), grad, zero);
  } else if (min) {
    return where(self >= *min, grad, zero);
  } else if (max) {
    return where(self <= *max, grad, zero);
  }
  return grad;
}

inline std::tuple<Tensor, Tensor> clamp_backward_min_max(const Tensor& grad, const Tensor& self,
                                                         const Tensor& min, const Tensor& max,
                                                         const std::array<bool, 2>& mask) {
  std::tuple<Tensor, Tensor> ret;
  if (!grad.defined()) {
    return ret;
  }
  auto zero = at::scalar_tensor(0., grad.options());
  if (max.defined() && min.defined()) {
    if (mask[0]) {
      std::get<0>(ret) = where((self < min).logical_and(min < max), grad, zero);
    }
    if (mask[1]) {
      std::get<1>(ret) = where((self > max).logical_or(max < min), grad, zero);
    }
  }
  return ret;
}

// FunctionsManual.cpp prod_safe_zeros_backward as core has it today (size-1 shortcut).
inline Tensor prod_safe_zeros_backward(const Tensor& grad, const Tensor& inp, int64_t dim) {
  if (inp.size(dim) == 1) {
    return grad;
  }
  auto ones_size = inp.sizes().vec();
  ones_size[dim] = 1;
  Tensor ones = at::ones(ones_size, grad.options());
  Tensor exclusive_normal_nocp = at::cat({ones, inp.narrow(dim, 0, inp.size(dim) - 1)}, dim);
  Tensor exclusive_normal = exclusive_normal_nocp.cumprod(dim);
  Tensor narrow_reverse = inp.narrow(dim, 1, inp.size(dim) - 1).flip(dim);
  Tensor exclusive_reverse_nocp = at::cat({ones, narrow_reverse}, dim);
  Tensor exclusive_reverse = exclusive_reverse_nocp.cumprod(dim).flip(dim);
  return grad * (exclusive_normal * exclusive_reverse).conj();
}

// prod_backward's subclass-like ("always the safe path") branch made unconditional
// (pytorch#81969), as lib/funcbwd_lab/ops/discussion/prod.py's prod_modern_backward.
inline Tensor prod_backward(const Tensor& grad, const Tensor& input, const Tensor& result,
                            std::optional<int64_t> dim, bool keepdim) {
  if (input.dim() == 0) {
    return grad;
  }
  if (!dim) {
    return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input);
  }
  int64_t d = at::maybe_wrap_dim(*dim, input.dim());
  return prod_safe_zeros_backward(keepdim ? grad : grad.unsqueeze(d), input, d);
}

}  // namespace modern
// The formulas as the approaches call them: one function per formula, its arguments in the
// order the Python formula takes them (OpSpec.formula_args), so that the composite ops' schemas
// and the traced graphs' inputs are the Python ones. clamp: both C++ functions, min/max
// gradients when min_max_grads; prod: both overloads, dim None for the full reduction.
namespace combined {

template <bool Modern>
inline Tensor3 clamp_backward(const Tensor& grad, const Tensor& self, const OptTensor& min,
                              const OptTensor& max, bool min_max_grads) {
  Tensor grad_self = Modern ? modern::clamp_backward(grad, self, min, max)
                            : legacy::clamp_backward(grad, self, min, max);
  if (!(min_max_grads && min && max && min->defined() && max->defined())) {
    return {grad_self, Tensor(), Tensor()};
  }
  auto mm = Modern ? modern::clamp_backward_min_max(grad, self, *min, *max, {true, true})
                   : legacy::clamp_backward_min_max(grad, self, *min, *max, {true, true});
  return {grad_self, std::get<0>(mm), std::get<1>(mm)};
}

template <bool Modern>
inline Tensor prod_backward(const Tensor& grad, const Tensor& input, const Tensor& result,
                            std::optional<int64_t> dim, bool keepdim) {
  if (Modern) {
    return modern::prod_backward(grad, input, result, dim, keepdim);
  }
  return dim ? legacy::prod_backward(grad, input, result, *dim, keepdim)
             : legacy::prod_backward(grad, input, result);
}

}  // namespace combined
}  // namespace funcbwd_cpp
