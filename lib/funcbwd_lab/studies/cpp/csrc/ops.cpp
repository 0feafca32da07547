// The 8 test ops as operators with autograd, once per approach, and approach 1's formula ops.
//
// funcbwd_cpp::<op>_<approach> (e.g. diag_guard) computes torch's forward; its Autograd kernel
// builds a backward node the way torch's generated VariableType code does (a Node subclass,
// saved variables, set_history, the forward-mode tangent set on the output), and the node
// calls the op's formula under the approach (approaches.h). A C++ torch::autograd::Function
// cannot be used: it refuses every functorch transform ("cannot use C++
// torch::autograd::Function with functorch transforms"). The forward ops' FuncTorchBatched
// kernel is torch's forward op (a decomposition, as functorch registers for composite ops).
//
// Approach 1's operators, funcbwd_cpp::<formula>_backward, have three kernels: the formula as
// written (CompositeExplicitAutograd), an Autograd kernel that redispatches below autograd
// unless an input needs a gradient (then it decomposes the op, so double backward sees the
// formula's ops), and the functionalizing FuncTorchBatched kernel.
#include "approaches.h"

#include <ATen/functorch/BatchedTensorImpl.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

namespace funcbwd_cpp {
namespace {
using torch::autograd::collect_next_edges;
using torch::autograd::compute_requires_grad;
using torch::autograd::isFwGradDefined;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::set_history;
using torch::autograd::variable_list;

template <class Fn>
auto below_autograd(Fn&& f) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return f();
}

Tensor fw_grad(const Tensor& t) {
  return t._fw_grad(/*level=*/0);
}

// ------------------------------------------------------------------ diag
template <Approach A>
struct DiagBackward : Node {
  std::vector<int64_t> self_sizes;
  int64_t diagonal = 0;
  std::string name() const override { return "DiagBackwardCpp"; }
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (task_should_compute_output(0) && grads[0].defined())
      out[0] = diag_formula<A>(grads[0], self_sizes, diagonal);
    return out;
  }
};

Tensor diag_fwd(const Tensor& self, int64_t diagonal) { return at::diag(self, diagonal); }

template <Approach A>
Tensor diag_op(const Tensor& self, int64_t diagonal) {
  c10::intrusive_ptr<DiagBackward<A>> node;
  if (compute_requires_grad(self)) {
    node = c10::make_intrusive<DiagBackward<A>>();
    node->set_next_edges(collect_next_edges(self));
    node->self_sizes = self.sizes().vec();
    node->diagonal = diagonal;
  }
  Tensor result = below_autograd([&] { return diag_fwd(self, diagonal); });
  if (node) set_history(result, node);
  if (isFwGradDefined(self)) result._set_fw_grad(at::diag(fw_grad(self), diagonal), 0, false);
  return result;
}

// ------------------------------------------------------------------ index_select
template <Approach A>
struct IndexSelectBackward : Node {
  std::vector<int64_t> self_sizes;
  int64_t dim = 0;
  SavedVariable index_;
  std::string name() const override { return "IndexSelectBackwardCpp"; }
  void release_variables() override { index_.reset_data(); }
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (task_should_compute_output(0) && grads[0].defined())
      out[0] = index_select_formula<A>(grads[0], self_sizes, dim, index_.unpack());
    return out;
  }
};

Tensor index_select_fwd(const Tensor& self, int64_t dim, const Tensor& index) {
  return at::index_select(self, dim, index);
}

template <Approach A>
Tensor index_select_op(const Tensor& self, int64_t dim, const Tensor& index) {
  c10::intrusive_ptr<IndexSelectBackward<A>> node;
  if (compute_requires_grad(self)) {
    node = c10::make_intrusive<IndexSelectBackward<A>>();
    node->set_next_edges(collect_next_edges(self));
    node->self_sizes = self.sizes().vec();
    node->dim = dim;
    node->index_ = SavedVariable(index, false);
  }
  Tensor result = below_autograd([&] { return index_select_fwd(self, dim, index); });
  if (node) set_history(result, node);
  if (isFwGradDefined(self))
    result._set_fw_grad(at::index_select(fw_grad(self), dim, index), 0, false);
  return result;
}

// ------------------------------------------------------------------ topk, sort, mode
template <Approach A>
struct ValueSelectingBackward : Node {
  std::vector<int64_t> self_sizes;
  int64_t dim = 0;
  bool keepdim = true;
  SavedVariable indices_;
  std::string name() const override { return "ValueSelectingBackwardCpp"; }
  void release_variables() override { indices_.reset_data(); }
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (task_should_compute_output(0) && grads[0].defined())
      out[0] = value_selecting_formula<A>(grads[0], dim, indices_.unpack(getptr()), self_sizes,
                                          keepdim);
    return out;
  }
};

Tensor gather_tangent(const Tensor& t, int64_t dim, const Tensor& indices, bool keepdim) {
  if (t.dim() == 0) return t;
  if (!keepdim) return t.gather(dim, indices.unsqueeze(dim)).squeeze(dim);
  return t.gather(dim, indices);
}

// values, indices = forward(); the node saves indices (an output) and the reduction's dim
template <Approach A, class Fwd>
std::tuple<Tensor, Tensor> value_selecting_op(const Tensor& self, int64_t dim, bool keepdim,
                                              Fwd&& forward) {
  c10::intrusive_ptr<ValueSelectingBackward<A>> node;
  if (compute_requires_grad(self)) {
    node = c10::make_intrusive<ValueSelectingBackward<A>>();
    node->set_next_edges(collect_next_edges(self));
    node->self_sizes = self.sizes().vec();
    node->dim = dim;  // as the Python formula receives it (the traced graphs' signatures)
    node->keepdim = keepdim;
  }
  auto [values, indices] = below_autograd(forward);
  if (node) {
    set_history(values, node);
    node->indices_ = SavedVariable(indices, true);
  }
  if (isFwGradDefined(self))
    values._set_fw_grad(gather_tangent(fw_grad(self), dim, indices, keepdim), 0, false);
  return {values, indices};
}

std::tuple<Tensor, Tensor> topk_fwd(const Tensor& self, int64_t k, int64_t dim, bool largest,
                                    bool sorted) {
  return at::topk(self, k, dim, largest, sorted);
}
template <Approach A>
std::tuple<Tensor, Tensor> topk_op(const Tensor& self, int64_t k, int64_t dim, bool largest,
                                   bool sorted) {
  return value_selecting_op<A>(self, dim, true,
                               [&] { return topk_fwd(self, k, dim, largest, sorted); });
}

std::tuple<Tensor, Tensor> sort_fwd(const Tensor& self, int64_t dim, bool descending) {
  return at::sort(self, dim, descending);
}
template <Approach A>
std::tuple<Tensor, Tensor> sort_op(const Tensor& self, int64_t dim, bool descending) {
  return value_selecting_op<A>(self, dim, true, [&] { return sort_fwd(self, dim, descending); });
}

std::tuple<Tensor, Tensor> mode_fwd(const Tensor& self, int64_t dim, bool keepdim) {
  return at::mode(self, dim, keepdim);
}
template <Approach A>
std::tuple<Tensor, Tensor> mode_op(const Tensor& self, int64_t dim, bool keepdim) {
  return value_selecting_op<A>(self, dim, keepdim, [&] { return mode_fwd(self, dim, keepdim); });
}

// ------------------------------------------------------------------ masked_select
template <Approach A>
struct MaskedSelectBackward : Node {
  SavedVariable self_, mask_;
  std::string name() const override { return "MaskedSelectBackwardCpp"; }
  void release_variables() override {
    self_.reset_data();
    mask_.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (task_should_compute_output(0) && grads[0].defined())
      out[0] = masked_select_formula<A>(grads[0], self_.unpack(), mask_.unpack());
    return out;
  }
};

Tensor masked_select_fwd(const Tensor& self, const Tensor& mask) {
  return at::masked_select(self, mask);
}

template <Approach A>
Tensor masked_select_op(const Tensor& self, const Tensor& mask) {
  c10::intrusive_ptr<MaskedSelectBackward<A>> node;
  if (compute_requires_grad(self)) {
    node = c10::make_intrusive<MaskedSelectBackward<A>>();
    node->set_next_edges(collect_next_edges(self));
    node->self_ = SavedVariable(self, false);
    node->mask_ = SavedVariable(mask, false);
  }
  Tensor result = below_autograd([&] { return masked_select_fwd(self, mask); });
  if (node) set_history(result, node);
  if (isFwGradDefined(self))
    result._set_fw_grad(at::masked_select(fw_grad(self), mask), 0, false);
  return result;
}

// ------------------------------------------------------------------ clamp (Tensor min/max)
template <Approach A>
struct ClampBackward : Node {
  SavedVariable self_, min_, max_;
  bool has_min = false, has_max = false;
  std::string name() const override { return "ClampBackwardCpp"; }
  void release_variables() override {
    self_.reset_data();
    min_.reset_data();
    max_.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    variable_list out(3);
    if (!grads[0].defined()) return out;
    OptTensor min = has_min ? OptTensor(min_.unpack()) : std::nullopt;
    OptTensor max = has_max ? OptTensor(max_.unpack()) : std::nullopt;
    // min_max_grads: both bounds are tensors and one of them needs a gradient (the Python
    // formula's flag is "both bounds are tensors": a scalar bound arrives here as a 0-dim
    // tensor that needs none); the node keeps only the gradients it must compute
    bool min_max_grads =
        has_min && has_max && (task_should_compute_output(1) || task_should_compute_output(2));
    auto [gs, gmin, gmax] = clamp_formula<A>(grads[0], self_.unpack(), min, max, min_max_grads);
    if (task_should_compute_output(0)) out[0] = gs;
    if (task_should_compute_output(1)) out[1] = gmin;
    if (task_should_compute_output(2)) out[2] = gmax;
    return out;
  }
};

Tensor clamp_fwd(const Tensor& self, const OptTensor& min, const OptTensor& max) {
  return at::clamp(self, min, max);
}

Tensor clamp_tangent(const Tensor& self, const OptTensor& min, const OptTensor& max) {
  // as lib/funcbwd_lab/ops/discussion/clamp.py's _clamp_jvp, each bound's tangent (zero if none)
  auto tangent = [](const OptTensor& t, const Tensor& like) {
    if (!t || !t->defined()) return at::zeros_like(like);
    Tensor g = fw_grad(*t);
    return g.defined() ? g : at::zeros_like(*t);
  };
  auto zero = at::scalar_tensor(0., self.options());
  Tensor out = at::where((self >= *min).logical_and(self <= *max), tangent(self, self), zero);
  out = out + at::where((self < *min).logical_and(*min < *max), tangent(min, *min), zero);
  return out + at::where((self > *max).logical_or(*max < *min), tangent(max, *max), zero);
}

template <Approach A>
Tensor clamp_op(const Tensor& self, const OptTensor& min, const OptTensor& max) {
  c10::intrusive_ptr<ClampBackward<A>> node;
  if (compute_requires_grad(self, min, max)) {
    node = c10::make_intrusive<ClampBackward<A>>();
    node->set_next_edges(collect_next_edges(self, min, max));
    node->self_ = SavedVariable(self, false);
    node->has_min = min.has_value() && min->defined();
    node->has_max = max.has_value() && max->defined();
    if (node->has_min) node->min_ = SavedVariable(*min, false);
    if (node->has_max) node->max_ = SavedVariable(*max, false);
  }
  Tensor result = below_autograd([&] { return clamp_fwd(self, min, max); });
  if (node) set_history(result, node);
  if (isFwGradDefined(self) || isFwGradDefined(min) || isFwGradDefined(max)) {
    TORCH_CHECK(min && max && min->defined() && max->defined(),
                "funcbwd_cpp clamp: forward mode needs both bounds");
    result._set_fw_grad(clamp_tangent(self, min, max), 0, false);
  }
  return result;
}

// ------------------------------------------------------------------ prod
template <Approach A>
struct ProdBackward : Node {
  SavedVariable self_, result_;
  std::optional<int64_t> dim;
  bool keepdim = false;
  std::string name() const override { return "ProdBackwardCpp"; }
  void release_variables() override {
    self_.reset_data();
    result_.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (task_should_compute_output(0) && grads[0].defined())
      out[0] = prod_formula<A>(grads[0], self_.unpack(), result_.unpack(getptr()), dim, keepdim);
    return out;
  }
};

Tensor prod_fwd(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return dim ? at::prod(self, *dim, keepdim) : at::prod(self);
}

template <Approach A>
Tensor prod_op(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  c10::intrusive_ptr<ProdBackward<A>> node;
  if (compute_requires_grad(self)) {
    node = c10::make_intrusive<ProdBackward<A>>();
    node->set_next_edges(collect_next_edges(self));
    node->self_ = SavedVariable(self, false);
    node->dim = dim;
    node->keepdim = keepdim;
  }
  Tensor result = below_autograd([&] { return prod_fwd(self, dim, keepdim); });
  if (node) {
    set_history(result, node);
    node->result_ = SavedVariable(result, true);
  }
  if (isFwGradDefined(self)) {
    // as prod.py's _prod_jvp: the legacy formula's gradient times the tangent, summed
    Tensor g = combined::prod_backward<false>(at::ones_like(result), self, result, dim, keepdim);
    Tensor t = g * fw_grad(self);
    result._set_fw_grad(dim ? t.sum(*dim, keepdim) : t.sum(), 0, false);
  }
  return result;
}

// ------------------------------------------------------------------ approach 1's kernels
template <class... Args>
bool needs_grad(const Args&... args) {
  bool any = false;
  auto one = [&](const auto& a) {
    using T = std::decay_t<decltype(a)>;
    if constexpr (std::is_same_v<T, Tensor>) {
      any = any || (a.defined() && ((c10::GradMode::is_enabled() && a.requires_grad()) ||
                                    fw_grad(a).defined()));
    } else if constexpr (std::is_same_v<T, OptTensor>) {
      any = any || (a && a->defined() &&
                    ((c10::GradMode::is_enabled() && a->requires_grad()) ||
                     fw_grad(*a).defined()));
    }
  };
  (one(args), ...);
  return any;
}

template <class... Args>
bool batched_at_current_level(const Args&... args) {
  int64_t level = F::getDynamicLayerStack().back().layerId();
  bool any = false;
  auto one = [&](const auto& a) {
    using T = std::decay_t<decltype(a)>;
    const Tensor* t = nullptr;
    if constexpr (std::is_same_v<T, Tensor>) t = &a;
    if constexpr (std::is_same_v<T, OptTensor>) t = a ? &*a : nullptr;
    if (t && t->defined()) {
      auto* b = F::maybeGetBatchedImpl(*t);
      any = any || (b && b->level() == level);
    }
  };
  (one(args), ...);
  return any;
}

// Kernels of funcbwd_cpp::<formula>_backward; Sig is its C++ signature.
template <class Sig, Op OP, class Legacy>
struct FormulaOp;

template <class R, class... P, Op OP, class Legacy>
struct FormulaOp<R(P...), OP, Legacy> {
  static const c10::TypedOperatorHandle<R(P...)>& handle(const char* name) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<R(P...)>();
    return op;
  }
  template <const char* Name>
  static R explicit_kernel(P... args) {
    count(Event::composite_explicit, OP);
    return Legacy{}(args...);
  }
  template <const char* Name>
  static R autograd_kernel(P... args) {
    if (needs_grad(args...)) {
      count(Event::composite_decomposed, OP);
      return Legacy{}(args...);
    }
    at::AutoDispatchBelowADInplaceOrView guard;
    return handle(Name).call(args...);
  }
  template <const char* Name>
  static R batched_kernel(P... args) {
    if (!batched_at_current_level(args...)) {
      c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
      return handle(Name).call(args...);
    }
    count(Event::composite_batched, OP);
    ReopenVmapFront front;
    return functionalize_call(Legacy{}, args...);
  }
};

#define FUNCBWD_LEGACY_FN(NAME, BODY)                                          \
  struct NAME {                                                                \
    template <class... A>                                                      \
    auto operator()(const A&... a) const { return BODY(a...); }                \
  };
FUNCBWD_LEGACY_FN(LegacyDiag, legacy::diag_backward)
FUNCBWD_LEGACY_FN(LegacyIndexSelect, legacy::index_select_backward)
FUNCBWD_LEGACY_FN(LegacyValueSelecting, legacy::value_selecting_reduction_backward)
FUNCBWD_LEGACY_FN(LegacyMaskedSelect, legacy::masked_select_backward)
FUNCBWD_LEGACY_FN(LegacyClamp, combined::clamp_backward<false>)
FUNCBWD_LEGACY_FN(LegacyProd, combined::prod_backward<false>)
#undef FUNCBWD_LEGACY_FN

constexpr char kDiag[] = "funcbwd_cpp::diag_backward";
constexpr char kIndexSelect[] = "funcbwd_cpp::index_select_backward";
constexpr char kValueSelecting[] = "funcbwd_cpp::value_selecting_reduction_backward";
constexpr char kMaskedSelect[] = "funcbwd_cpp::masked_select_backward";
constexpr char kClamp[] = "funcbwd_cpp::clamp_backward";
constexpr char kProd[] = "funcbwd_cpp::prod_backward";

using DiagOp = FormulaOp<DiagSig, Op::diag, LegacyDiag>;
using IndexSelectOp = FormulaOp<IndexSelectSig, Op::index_select, LegacyIndexSelect>;
using ValueSelectingOp = FormulaOp<ValueSelectingSig, Op::value_selecting, LegacyValueSelecting>;
using MaskedSelectOp = FormulaOp<MaskedSelectSig, Op::masked_select, LegacyMaskedSelect>;
using ClampOp = FormulaOp<ClampSig, Op::clamp, LegacyClamp>;
using ProdOp = FormulaOp<ProdSig, Op::prod, LegacyProd>;

}  // namespace
}  // namespace funcbwd_cpp

// ------------------------------------------------------------------ registration
using namespace funcbwd_cpp;

#define FUNCBWD_FORWARD_SCHEMAS(M, SUFFIX)                                                     \
  M.def("diag_" SUFFIX "(Tensor self, int diagonal=0) -> Tensor");                             \
  M.def("index_select_" SUFFIX "(Tensor self, int dim, Tensor index) -> Tensor");              \
  M.def("topk_" SUFFIX                                                                         \
        "(Tensor self, int k, int dim=-1, bool largest=True, bool sorted=True) -> "            \
        "(Tensor, Tensor)");                                                                   \
  M.def("sort_" SUFFIX "(Tensor self, int dim=-1, bool descending=False) -> (Tensor, Tensor)"); \
  M.def("mode_" SUFFIX "(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor, Tensor)");   \
  M.def("masked_select_" SUFFIX "(Tensor self, Tensor mask) -> Tensor");                       \
  M.def("clamp_" SUFFIX "(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor");        \
  M.def("prod_" SUFFIX "(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");

#define FUNCBWD_FORWARD_PLAIN(M, SUFFIX)           \
  M.impl("diag_" SUFFIX, diag_fwd);                \
  M.impl("index_select_" SUFFIX, index_select_fwd); \
  M.impl("topk_" SUFFIX, topk_fwd);                \
  M.impl("sort_" SUFFIX, sort_fwd);                \
  M.impl("mode_" SUFFIX, mode_fwd);                \
  M.impl("masked_select_" SUFFIX, masked_select_fwd); \
  M.impl("clamp_" SUFFIX, clamp_fwd);              \
  M.impl("prod_" SUFFIX, prod_fwd);

#define FUNCBWD_FORWARD_AUTOGRAD(M, SUFFIX, A)             \
  M.impl("diag_" SUFFIX, diag_op<A>);                      \
  M.impl("index_select_" SUFFIX, index_select_op<A>);      \
  M.impl("topk_" SUFFIX, topk_op<A>);                      \
  M.impl("sort_" SUFFIX, sort_op<A>);                      \
  M.impl("mode_" SUFFIX, mode_op<A>);                      \
  M.impl("masked_select_" SUFFIX, masked_select_op<A>);    \
  M.impl("clamp_" SUFFIX, clamp_op<A>);                    \
  M.impl("prod_" SUFFIX, prod_op<A>);

#define FUNCBWD_EACH_APPROACH(X, M) \
  X(M, "legacy", Approach::legacy)   \
  X(M, "handfixed", Approach::handfixed) \
  X(M, "guard", Approach::guard)     \
  X(M, "composite", Approach::composite) \
  X(M, "traced", Approach::traced)

#define FUNCBWD_DEF(M, S, A) FUNCBWD_FORWARD_SCHEMAS(M, S)
#define FUNCBWD_PLAIN(M, S, A) FUNCBWD_FORWARD_PLAIN(M, S)
#define FUNCBWD_AUTOGRAD(M, S, A) FUNCBWD_FORWARD_AUTOGRAD(M, S, A)

TORCH_LIBRARY(funcbwd_cpp, m) {
  FUNCBWD_EACH_APPROACH(FUNCBWD_DEF, m)
  // approach 1: one operator per formula, the Python formulas' schemas (OpSpec.schema)
  m.def("diag_backward(Tensor grad, int[] input_sizes, int diagonal) -> Tensor");
  m.def("index_select_backward(Tensor grad, int[] self_sizes, int dim, Tensor index) -> Tensor");
  m.def("value_selecting_reduction_backward(Tensor grad, int dim, Tensor indices, int[] sizes, "
        "bool keepdim) -> Tensor");
  m.def("masked_select_backward(Tensor grad, Tensor input, Tensor mask) -> Tensor");
  m.def("clamp_backward(Tensor grad, Tensor self, Tensor? min, Tensor? max, bool min_max_grads) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("prod_backward(Tensor grad, Tensor input, Tensor result, int? dim, bool keepdim) -> Tensor");
}

TORCH_LIBRARY_IMPL(funcbwd_cpp, CompositeExplicitAutograd, m) {
  FUNCBWD_EACH_APPROACH(FUNCBWD_PLAIN, m)
  m.impl("diag_backward", DiagOp::explicit_kernel<kDiag>);
  m.impl("index_select_backward", IndexSelectOp::explicit_kernel<kIndexSelect>);
  m.impl("value_selecting_reduction_backward", ValueSelectingOp::explicit_kernel<kValueSelecting>);
  m.impl("masked_select_backward", MaskedSelectOp::explicit_kernel<kMaskedSelect>);
  m.impl("clamp_backward", ClampOp::explicit_kernel<kClamp>);
  m.impl("prod_backward", ProdOp::explicit_kernel<kProd>);
}

TORCH_LIBRARY_IMPL(funcbwd_cpp, Autograd, m) {
  FUNCBWD_EACH_APPROACH(FUNCBWD_AUTOGRAD, m)
  m.impl("diag_backward", DiagOp::autograd_kernel<kDiag>);
  m.impl("index_select_backward", IndexSelectOp::autograd_kernel<kIndexSelect>);
  m.impl("value_selecting_reduction_backward", ValueSelectingOp::autograd_kernel<kValueSelecting>);
  m.impl("masked_select_backward", MaskedSelectOp::autograd_kernel<kMaskedSelect>);
  m.impl("clamp_backward", ClampOp::autograd_kernel<kClamp>);
  m.impl("prod_backward", ProdOp::autograd_kernel<kProd>);
}

TORCH_LIBRARY_IMPL(funcbwd_cpp, FuncTorchBatched, m) {
  FUNCBWD_EACH_APPROACH(FUNCBWD_PLAIN, m)
  m.impl("diag_backward", DiagOp::batched_kernel<kDiag>);
  m.impl("index_select_backward", IndexSelectOp::batched_kernel<kIndexSelect>);
  m.impl("value_selecting_reduction_backward", ValueSelectingOp::batched_kernel<kValueSelecting>);
  m.impl("masked_select_backward", MaskedSelectOp::batched_kernel<kMaskedSelect>);
  m.impl("clamp_backward", ClampOp::batched_kernel<kClamp>);
  m.impl("prod_backward", ProdOp::batched_kernel<kProd>);
}
