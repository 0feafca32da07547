// What running a formula "with Functionalize" takes inside a functorch transform, in C++:
// the pieces every approach of the C++ study shares (docs/cpp.md, "What option 2 takes").
//
// * FunctionalizeScope: a Functionalize *layer* pushed on functorch's dynamic layer stack (a
//   TLS include of DispatchKey::Functionalize is not enough: entering the vmap layer excludes
//   every functorch key but its own, so the formula's in-place ops would still meet vmap;
//   naive_guard_probe in module.cpp shows it), every tensor argument wrapped as a
//   FunctionalTensorWrapper at that layer's level, each output synced and unwrapped, each
//   input synced and its mutation (if any) copied back, the layer popped on every exit path.
// * functionalize_call(f, args...): the above around one call of f.
// * ReopenVmapFront: for a kernel registered at FuncTorchBatched (approach 1), which runs
//   *inside* the vmap layer's processing: it restores the dispatch TLS that the layer saved at
//   its front and clears that save, so that calls made by the kernel go through the layer
//   stack again (through the Functionalize layer, then this vmap layer); undone on exit.
#pragma once
#include <ATen/ATen.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/functorch/DynamicLayer.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

namespace funcbwd_cpp {
namespace F = at::functorch;
namespace FI = at::functionalization::impl;
using at::Tensor;

// ------------------------------------------------------------------ provenance counters
// Thread-local counts of what ran (one row per event, one column per formula: topk, sort and
// mode share value_selecting): the strategies read them before and after a transform call and
// record the difference as provenance.
#define FUNCBWD_FORMULAS(X) X(diag) X(index_select) X(value_selecting) X(masked_select) X(clamp) X(prod)
// what ran (each kind of call the approaches make; module.cpp exports the names)
#define FUNCBWD_EVENTS(X)                                                                   \
  X(legacy)               /* a legacy formula ran as written */                            \
  X(handfixed)            /* a modern (out-of-place) formula ran */                        \
  X(guard_functionalized) /* option 2: the guard saw vmap and functionalized the formula */ \
  X(guard_as_written)     /* option 2: no vmap level, the formula ran as written */        \
  X(composite_batched)    /* approach 1: the FuncTorchBatched kernel functionalized it */  \
  X(composite_explicit)   /* approach 1: the CompositeExplicitAutograd kernel (as written) */ \
  X(composite_decomposed) /* approach 1: the Autograd kernel decomposed the op */          \
  X(whole_functionalized) /* whole: the vjp_fn ran under a Functionalize layer */          \
  X(whole_as_written)     /* whole: no vmap level, the vjp_fn ran as written */            \
  X(traced_graph)         /* traced: a graph generated at build time ran */                \
  X(traced_fallback)      /* traced: no graph for the signature, functionalized at call time */ \
  X(traced_as_written)    /* traced: outside every transform, the formula ran as written */
#define FUNCBWD_ENUM_ITEM(name) name,
enum class Op : int { FUNCBWD_FORMULAS(FUNCBWD_ENUM_ITEM) count };
enum class Event : int { FUNCBWD_EVENTS(FUNCBWD_ENUM_ITEM) count };
#undef FUNCBWD_ENUM_ITEM
constexpr int kOps = static_cast<int>(Op::count);
constexpr int kEvents = static_cast<int>(Event::count);

int64_t* counter_table();  // kEvents x kOps, thread-local (module.cpp)
int64_t& open_scopes();    // Functionalize layers / reopened fronts not yet closed (module.cpp)

inline void count(Event e, Op op) {
  counter_table()[static_cast<int>(e) * kOps + static_cast<int>(op)] += 1;
}

// ------------------------------------------------------------------ the trigger
// "under FuncTorchBatched": a vmap layer is on the functorch stack (the same test as the
// Python strategies' funcbwd.internals.vmap_active), and the formula is not already running
// under the Functionalize layer a guard pushed (the guard's recursion stop).
inline bool vmap_active() {
  const auto& stack = F::getDynamicLayerStack();
  for (const auto& layer : stack) {
    if (layer.key() == F::TransformType::Vmap) return true;
  }
  return false;
}

inline bool needs_functionalize() {
  const auto& stack = F::getDynamicLayerStack();
  if (stack.empty() || stack.back().key() == F::TransformType::Functionalize) return false;
  return vmap_active();
}

// ------------------------------------------------------------------ the Functionalize layer
class FunctionalizeScope {
 public:
  FunctionalizeScope()
      : level_(F::initAndPushDynamicLayer(F::TransformType::Functionalize, std::nullopt,
                                          std::nullopt, std::nullopt, std::nullopt,
                                          /*functionalize_add_back_views=*/true)) {
    ++open_scopes();
  }
  ~FunctionalizeScope() {
    F::popDynamicLayerAndDeleteMetadata();
    --open_scopes();
  }
  FunctionalizeScope(const FunctionalizeScope&) = delete;
  FunctionalizeScope& operator=(const FunctionalizeScope&) = delete;

  Tensor wrap(const Tensor& t) const {
    if (!t.defined()) return t;
    Tensor w = FI::to_functional_tensor(t);
    FI::unsafeGetFunctionalWrapper(w)->set_level(level_);
    return w;
  }
  std::optional<Tensor> wrap(const std::optional<Tensor>& t) const {
    if (!t) return t;
    return wrap(*t);
  }
  template <class T>
  const T& wrap(const T& v) const {  // sizes, ints, bools: passed through
    return v;
  }

  static Tensor unwrap(const Tensor& t) {
    if (!t.defined() || !FI::isFunctionalTensor(t)) return t;
    FI::sync(t);
    return FI::from_functional_tensor(t);
  }
  template <class... Ts>
  static std::tuple<Ts...> unwrap(const std::tuple<Ts...>& ts) {
    return std::apply([](const auto&... t) { return std::tuple<Ts...>(unwrap(t)...); }, ts);
  }

  // An input the formula mutated: its new value copied back (none of the 8 formulas mutates
  // an argument; torch.func.functionalize does the same, _propagate_functional_input_mutation).
  static void propagate(const Tensor& original, const Tensor& wrapped) {
    if (!wrapped.defined() || !FI::isFunctionalTensor(wrapped)) return;
    FI::sync(wrapped);
    const Tensor& inner = FI::unsafeGetFunctionalWrapper(wrapped)->value();
    if (inner.unsafeGetTensorImpl() != original.unsafeGetTensorImpl()) original.copy_(inner);
  }
  static void propagate(const std::optional<Tensor>& original,
                        const std::optional<Tensor>& wrapped) {
    if (original && wrapped) propagate(*original, *wrapped);
  }
  template <class T, class U>
  static void propagate(const T&, const U&) {}

 private:
  int64_t level_;
};

template <class Fn, class Tuple, class Args, std::size_t... I>
auto call_and_propagate(Fn&& f, const Tuple& wrapped, const Args& originals,
                        std::index_sequence<I...>) {
  auto out = std::apply(f, wrapped);
  auto result = FunctionalizeScope::unwrap(out);
  (FunctionalizeScope::propagate(std::get<I>(originals), std::get<I>(wrapped)), ...);
  return result;
}

// f(args...) under a Functionalize layer: wrap, call, unwrap and sync, propagate, pop.
template <class Fn, class... Args>
auto functionalize_call(Fn&& f, const Args&... args) {
  FunctionalizeScope scope;
  auto wrapped = std::make_tuple(scope.wrap(args)...);
  return call_and_propagate(std::forward<Fn>(f), wrapped, std::forward_as_tuple(args...),
                            std::index_sequence_for<Args...>{});
}

// ------------------------------------------------------------------ a FuncTorchBatched kernel
class ReopenVmapFront {
 public:
  ReopenVmapFront() : saved_(take_front()) {
    tls_.emplace(saved_);
    ++open_scopes();
  }
  ~ReopenVmapFront() {
    tls_.reset();
    auto layer = F::popDynamicLayer();
    layer.interpreter().saveLocalDispatchKeySet(saved_);
    F::pushDynamicLayer(std::move(layer));
    --open_scopes();
  }
  ReopenVmapFront(const ReopenVmapFront&) = delete;
  ReopenVmapFront& operator=(const ReopenVmapFront&) = delete;

 private:
  // the vmap layer's saved front TLS, cleared so that a nested front can save its own
  static c10::impl::LocalDispatchKeySet take_front() {
    auto layer = F::popDynamicLayer();
    auto saved = layer.interpreter().getSavedLocalDispatchKeySet();
    layer.interpreter().clearSavedLocalDispatchKeySet();
    F::pushDynamicLayer(std::move(layer));
    return saved;
  }
  c10::impl::LocalDispatchKeySet saved_;
  std::optional<c10::impl::ForceDispatchKeyGuard> tls_;
};

}  // namespace funcbwd_cpp
