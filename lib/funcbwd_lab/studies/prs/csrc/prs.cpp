// The small PRs' kernels (docs/prs/), built out of tree against the installed torch and loaded
// at run time by funcbwd_lab.studies.prs.build. Each kernel is the one its PR adds to PyTorch,
// registered at the same dispatch key, so its effect on the installed torch can be measured
// before anything lands. Nothing is registered at load: `funcbwd_prs::install(names)` registers
// the named kernels through torch::Library objects it owns, `funcbwd_prs::uninstall(names)`
// destroys them (the dispatcher then runs torch's own kernels again). The kernels:
//
//   cummaxmin_backward  FuncTorchBatchedDecomposition: torch's own CompositeImplicitAutograd
//                       kernel, as functorch's OP_DECOMPOSE registers its other decompositions
//   unfold_backward     FuncTorchBatchedDecomposition: a decomposition into arange/unfold and
//                       an out-of-place index_add (all with batching rules)
//   squeeze_copy.dim    FuncTorchBatchedDecomposition: torch's own composite view-copy kernel
//                       (squeeze.dim, then clone), like diagonal_copy's and alias_copy's
//   copy_batch_rule     FuncTorchBatched: aten::copy batched on the physical tensors, each
//                       sample laid out like dst's sample (upstream copy's contract)
//   copy_autograd       Autograd: aten::copy's derivative (self: zeros; src: the grad summed to
//                       src's shape) and forward-AD formula (copy(self_p, src_t))
//   bce_double_backward Autograd of binary_cross_entropy_backward: the double-backward node
//                       with the guard fixed (grad_output joins gI and grad in the
//                       isTensorSubclassLike check); reverse mode only (see its README)
//   bce_double_backward_upstream_guard   the same node with torch's guard (the mutation)

#include <ATen/ATen.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Reduction.h>
#include <ATen/functorch/DynamicLayer.h>
#include <ATen/functorch/PlumbingHelper.h>
#include <ATen/ops/cummaxmin_backward_native.h>
#include <ATen/ops/squeeze_copy_native.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

namespace {

using at::Tensor;

// ----------------------------------------------------------------------------- decompositions
// unfold's backward as ops that have batching rules (torch._decomp's decomposition, out of
// place): the windows' elements index_add-ed back into zeros of the input's shape. A 0-dim
// input has one window of size 1.
static Tensor unfold_backward_decomposition(const Tensor& grad, c10::SymIntArrayRef input_sizes,
    int64_t dim, int64_t size, int64_t step) {
  if (input_sizes.empty()) {
    return at::squeeze_copy(grad, 0);
  }
  const auto d = c10::maybe_wrap_dim(dim, static_cast<int64_t>(input_sizes.size()));
  auto positions = at::arange(input_sizes[d].guard_int(__FILE__, __LINE__),
                              grad.options().dtype(at::kLong)).unfold(0, size, step).flatten();
  auto windows = grad.movedim(-1, d + 1).flatten(d, d + 1);
  return at::zeros_symint(input_sizes, grad.options()).index_add(d, positions, windows);
}

// ----------------------------------------------------------------------------- aten::copy, vmap
// (to the end of copy_batch_rule: docs/prs/copy-rules.diff's text, tests/test_prs.py)
static bool may_overlap(at::IntArrayRef size, at::IntArrayRef stride) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims of size > 1
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] > 1) dims.emplace_back(stride[i], size[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 0;
  for (auto [st, n] : dims) {
    if (st <= span) return true;
    span += (n - 1) * st;
  }
  return false;
}

static bool self_overlaps(at::IntArrayRef size, at::IntArrayRef stride) {
  for (size_t i = 0; i < size.size(); ++i) {
    if (stride[i] == 0 && size[i] > 1) return true;
  }
  return false;
}

// Sample i of the result is src_i broadcast to dst's sample shape, cast to dst's dtype, laid out
// like dst's sample (its strides and storage offset inside a private frame per sample), which is
// what upstream aten::copy promises one sample (clone_preserve_strides(dst), then copy_(src)).
static Tensor copy_batch_rule(const Tensor& self, const Tensor& src, bool non_blocking) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  auto layer = at::functorch::maybeCurrentDynamicLayer();
  TORCH_INTERNAL_ASSERT(layer.has_value(), "copy_batch_rule outside vmap");
  const int64_t level = layer->layerId();
  const int64_t B = layer->batchSize().guard_int(__FILE__, __LINE__);
  auto [self_v, self_bdim] = at::functorch::unwrapTensorAtLevel(self, level);
  auto [src_v, src_bdim] = at::functorch::unwrapTensorAtLevel(src, level);

  Tensor x = self_bdim ? self_v.movedim(*self_bdim, 0) : self_v;
  const int64_t k = self_bdim ? 1 : 0;
  std::vector<int64_t> shape(x.sizes().begin() + k, x.sizes().end());
  std::vector<int64_t> strides(x.strides().begin() + k, x.strides().end());
  if (self_overlaps(shape, strides)) {  // upstream clones an overlapping dst contiguously
    x = x.contiguous();
    strides.assign(x.strides().begin() + k, x.strides().end());
  }
  const int64_t numel = c10::multiply_integers(shape);

  Tensor src_b = src_bdim ? src_v.movedim(*src_bdim, 0) : src_v.unsqueeze(0);
  const int64_t extra = static_cast<int64_t>(shape.size()) - (src_b.dim() - 1);
  TORCH_CHECK(extra >= 0, "vmap copy: src's sample shape ", src_b.sizes().slice(1),
              " does not broadcast to dst's sample shape ", at::IntArrayRef(shape));
  std::vector<int64_t> aligned{src_b.size(0)};
  aligned.insert(aligned.end(), extra, 1);
  aligned.insert(aligned.end(), src_b.sizes().begin() + 1, src_b.sizes().end());
  std::vector<int64_t> full{B};
  full.insert(full.end(), shape.begin(), shape.end());
  src_b = src_b.reshape(aligned).to(x.options(), non_blocking).expand(full);

  std::vector<int64_t> out_strides;
  if (numel == 0) {
    return at::functorch::makeBatched(at::empty(full, x.options()), 0, level);
  }
  const int64_t base = x.storage_offset();
  int64_t length = 1;
  for (size_t i = 0; i < shape.size(); ++i) length += (shape[i] - 1) * strides[i];
  if (base == 0 && length == numel && !may_overlap(shape, strides)) {
    // dst's sample is dense: src overwrites its whole frame, laid out in dst's stride order
    std::vector<int64_t> order(shape.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
    std::vector<int64_t> perm{0};
    for (auto d : order) perm.push_back(d + 1);
    auto dense = src_b.permute(perm).contiguous().reshape({B, numel});
    out_strides = {numel};
    out_strides.insert(out_strides.end(), strides.begin(), strides.end());
    return at::functorch::makeBatched(dense.as_strided(full, out_strides, 0), 0, level);
  }
  // otherwise each sample gets dst's frame (storage positions [0, base + length)), dst's values
  // kept where src does not write, and src is written through dst's geometry
  const int64_t extent = base + length;
  Tensor frames;
  if (self_bdim) {
    frames = at::zeros({B, extent}, x.options());
    frames.narrow(1, base, length).copy_(x.as_strided({B, length}, {x.stride(0), 1}, base));
  } else {
    frames = x.as_strided({extent}, {1}, 0).unsqueeze(0).expand({B, extent}).clone();
  }
  out_strides = {extent};
  out_strides.insert(out_strides.end(), strides.begin(), strides.end());
  auto out = frames.as_strided(full, out_strides, base);
  out.copy_(src_b, non_blocking);
  return at::functorch::makeBatched(out, 0, level);
}

// ----------------------------------------------------------------------------- aten::copy, AD
struct CopyBackward : public torch::autograd::Node {
  c10::TensorOptions src_options;
  std::vector<c10::SymInt> src_sizes;
  std::string name() const override { return "CopyBackward (funcbwd_prs)"; }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const auto& grad = grads[0];
    torch::autograd::variable_list out(2);
    if (!grad.defined()) return out;
    if (should_compute_output(0)) out[0] = at::zeros_like(grad);
    if (should_compute_output(1)) {
      auto g = (!c10::isComplexType(c10::typeMetaToScalarType(src_options.dtype())) &&
                grad.is_complex())
                   ? at::real(grad)
                   : grad;
      out[1] = at::sum_to(g, src_sizes).to(src_options);
    }
    return out;
  }
};

Tensor copy_autograd(const Tensor& self, const Tensor& src, bool non_blocking) {
  c10::intrusive_ptr<CopyBackward> grad_fn;
  if (torch::autograd::compute_requires_grad(self, src)) {
    grad_fn = c10::make_intrusive<CopyBackward>();
    grad_fn->set_next_edges(torch::autograd::collect_next_edges(self, src));
    grad_fn->src_options = src.options();
    grad_fn->src_sizes = src.sym_sizes().vec();
  }
  Tensor result;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    result = at::_ops::copy::call(self, src, non_blocking);
  }
  if (grad_fn) torch::autograd::set_history(result, grad_fn);
  // forward mode: the tangent is src's tangent copied into self's primal (shape, dtype, layout)
  auto src_t = src._fw_grad(/*level=*/0);
  if (src_t.defined()) {
    result._set_fw_grad(at::copy(self._fw_primal(0), src_t, non_blocking), /*level=*/0,
                        /*is_inplace_op=*/false);
  }
  return result;
}

// ----------------------------------------------------------------------------- BCE double bwd
// The three gradients of binary_cross_entropy_backward(grad_output, self, target, weight, red),
// written out of place except where every operand of the in-place write is a plain tensor; the
// fix: grad_output is one of those operands, so it is in the guard. `upstream_guard` keeps the
// guard as torch has it (gI and grad only): the kernel "bce_double_backward_upstream_guard", the
// mutation that shows the guard is what matters.
template <bool upstream_guard>
Tensor bce_double_backward_self(const Tensor& grad_output, const Tensor& grad,
                                const Tensor& input, const Tensor& target, const Tensor& weight,
                                int64_t reduction) {
  const double eps = 1e-12;
  auto gI = (input * input - 2 * input * target + target) /
            ((input + eps).pow(2) * (1 - input + eps).pow(2));
  const bool plain = upstream_guard ? !at::areAnyTensorSubclassLike({gI, grad})
                                    : !at::areAnyTensorSubclassLike({gI, grad, grad_output});
  if (plain) {
    gI *= (grad * grad_output);
  } else {
    gI = gI * (grad * grad_output);
  }
  if (weight.defined()) gI = gI * weight;
  return reduction == at::Reduction::Mean ? gI / input.sym_numel() : gI;
}

Tensor bce_double_backward_grad_output(const Tensor& grad, const Tensor& input,
                                       const Tensor& target, const Tensor& weight,
                                       int64_t reduction) {
  const double eps = 1e-12;
  auto ggO = (input - target) / ((input + eps) * (1 - input + eps)) * grad;
  if (weight.defined()) ggO = ggO * weight;
  return reduction == at::Reduction::Mean ? ggO / input.sym_numel() : ggO;
}

Tensor bce_double_backward_target(const Tensor& grad, const Tensor& grad_output,
                                  const Tensor& input, const Tensor& target, const Tensor& weight,
                                  int64_t reduction) {
  auto res = -grad * grad_output;
  if (weight.defined()) res = res * weight;
  Tensor denom;
  {
    at::NoGradGuard no_grad;
    denom = ((1 - input) * input).clamp_min(1e-12);
  }
  res = res / denom;
  return reduction == at::Reduction::Mean ? res / target.sym_numel() : res;
}

template <bool upstream_guard>
struct BceBackwardBackward : public torch::autograd::Node {
  torch::autograd::SavedVariable grad_output_, self_, target_, weight_;
  int64_t reduction = 0;
  std::string name() const override { return "BinaryCrossEntropyBackwardBackward (funcbwd_prs)"; }
  void release_variables() override {
    grad_output_.reset_data();
    self_.reset_data();
    target_.reset_data();
    weight_.reset_data();
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const auto& grad = grads[0];
    auto grad_output = grad_output_.unpack(), self = self_.unpack();
    auto target = target_.unpack(), weight = weight_.unpack();
    torch::autograd::variable_list out(3);
    if (!grad.defined()) return out;
    if (should_compute_output(0))
      out[0] = bce_double_backward_grad_output(grad, self, target, weight, reduction);
    if (should_compute_output(1))
      out[1] = bce_double_backward_self<upstream_guard>(grad_output, grad, self, target, weight,
                                                        reduction);
    if (should_compute_output(2))
      out[2] = bce_double_backward_target(grad, grad_output, self, target, weight, reduction);
    return out;
  }
};

template <bool upstream_guard>
Tensor bce_backward_autograd(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                             const std::optional<Tensor>& weight_opt, int64_t reduction) {
  const Tensor weight = weight_opt.has_value() ? *weight_opt : Tensor();
  c10::intrusive_ptr<BceBackwardBackward<upstream_guard>> grad_fn;
  if (torch::autograd::compute_requires_grad(grad_output, self, target)) {
    grad_fn = c10::make_intrusive<BceBackwardBackward<upstream_guard>>();
    grad_fn->set_next_edges(torch::autograd::collect_next_edges(grad_output, self, target));
    grad_fn->grad_output_ = torch::autograd::SavedVariable(grad_output, false);
    grad_fn->self_ = torch::autograd::SavedVariable(self, false);
    grad_fn->target_ = torch::autograd::SavedVariable(target, false);
    grad_fn->weight_ = torch::autograd::SavedVariable(weight, false);
    grad_fn->reduction = reduction;
  }
  Tensor result;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    result = at::_ops::binary_cross_entropy_backward::call(grad_output, self, target, weight_opt,
                                                           reduction);
  }
  if (grad_fn) torch::autograd::set_history(result, grad_fn);
  return result;
}

// ----------------------------------------------------------------------------- install
const std::vector<std::string> KERNELS = {"cummaxmin_backward", "unfold_backward",
                                          "squeeze_copy.dim",   "copy_batch_rule",
                                          "copy_autograd",      "bce_double_backward",
                                          "bce_double_backward_upstream_guard"};

std::mutex lock;
std::vector<std::pair<std::string, std::unique_ptr<torch::Library>>> installed;

std::unique_ptr<torch::Library> make(c10::DispatchKey key) {
  return std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
}

std::unique_ptr<torch::Library> library_for(const std::string& name) {
  using c10::DispatchKey;
  if (name == "cummaxmin_backward") {
    auto m = make(DispatchKey::FuncTorchBatchedDecomposition);
    m->impl("cummaxmin_backward", TORCH_FN(at::native::cummaxmin_backward));
    return m;
  }
  if (name == "unfold_backward") {
    auto m = make(DispatchKey::FuncTorchBatchedDecomposition);
    m->impl("unfold_backward", TORCH_FN(unfold_backward_decomposition));
    return m;
  }
  if (name == "squeeze_copy.dim") {
    auto m = make(DispatchKey::FuncTorchBatchedDecomposition);
    m->impl("squeeze_copy.dim", TORCH_FN(at::native::squeeze_copy_dim));
    return m;
  }
  if (name == "copy_batch_rule") {
    auto m = make(DispatchKey::FuncTorchBatched);
    m->impl("copy", TORCH_FN(copy_batch_rule));
    return m;
  }
  if (name == "copy_autograd") {
    auto m = make(DispatchKey::Autograd);
    m->impl("copy", TORCH_FN(copy_autograd));
    return m;
  }
  if (name == "bce_double_backward") {
    auto m = make(DispatchKey::Autograd);
    m->impl("binary_cross_entropy_backward", TORCH_FN(bce_backward_autograd<false>));
    return m;
  }
  if (name == "bce_double_backward_upstream_guard") {
    auto m = make(DispatchKey::Autograd);
    m->impl("binary_cross_entropy_backward", TORCH_FN(bce_backward_autograd<true>));
    return m;
  }
  std::string known;
  for (const auto& k : KERNELS) known += (known.empty() ? "" : ", ") + k;
  TORCH_CHECK(false, "funcbwd_prs: no kernel named '", name, "'; known: ", known);
}

std::vector<std::string> names_installed() {
  std::vector<std::string> out;
  for (const auto& [n, _] : installed) out.push_back(n);
  return out;
}

// Installs the named kernels not installed yet; returns those it installed.
std::vector<std::string> install(std::vector<std::string> names) {
  std::lock_guard<std::mutex> g(lock);
  std::vector<std::string> added;
  for (const auto& n : names) {
    bool present = std::any_of(installed.begin(), installed.end(),
                               [&](const auto& p) { return p.first == n; });
    if (!present) {
      installed.emplace_back(n, library_for(n));
      added.push_back(n);
    }
  }
  return added;
}

// Removes the named kernels (every one when `names` is empty).
void uninstall(std::vector<std::string> names) {
  std::lock_guard<std::mutex> g(lock);
  for (auto it = installed.end(); it != installed.begin();) {
    --it;
    if (names.empty() || std::find(names.begin(), names.end(), it->first) != names.end()) {
      it = installed.erase(it);
    }
  }
}

std::vector<std::string> kernels() { return KERNELS; }

std::vector<std::string> current() {
  std::lock_guard<std::mutex> g(lock);
  return names_installed();
}

}  // namespace

TORCH_LIBRARY(funcbwd_prs, m) {
  m.def("install(str[] names) -> str[]", &install);
  m.def("uninstall(str[] names) -> ()", &uninstall);
  m.def("kernels() -> str[]", &kernels);
  m.def("installed() -> str[]", &current);
}
