// The approaches of the design discussion (functorch#241) as the point where a backward node
// calls its formula: one template per formula, one branch per approach.
//
// * legacy:    the formula as written (in place): the historical failure under vmap.
// * handfixed: core's modern out-of-place formula (the C++ analog of the handfixed reference).
// * guard:     option 2, a guard inside the formula: under vmap, run it under Functionalize.
// * composite: approach 1, the formula is an operator (funcbwd_cpp::<formula>_backward) whose
//              FuncTorchBatched kernel functionalizes it (ops.cpp registers the kernels).
// * traced:    the formula's graph, traced once per signature and emitted as C++ at build time;
//              a signature without a graph is functionalized at call time (as guard does), and
//              outside every functorch transform the formula runs as written.
// (whole, the fifth, needs no formula-level branch: it runs the legacy nodes under one
// Functionalize layer around the whole vjp_fn; module.cpp.)
#pragma once
#include "functionalize.h"
#include "legacy.h"
#include "traced.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace funcbwd_cpp {

enum class Approach : int { legacy, handfixed, guard, composite, traced };

// Option 2: the guard. Everything after the condition is what the guard takes beyond itself.
template <class Fn, class... Args>
auto guarded(Op op, Fn&& f, const Args&... args) {
  if (needs_functionalize()) {
    count(Event::guard_functionalized, op);
    return functionalize_call(std::forward<Fn>(f), args...);
  }
  count(Event::guard_as_written, op);
  return f(args...);
}

template <class R>
R from_outputs(at::Tensor* out);
template <>
inline Tensor from_outputs<Tensor>(at::Tensor* out) {
  return out[0];
}
template <>
inline Tensor3 from_outputs<Tensor3>(at::Tensor* out) {
  return {out[0], out[1], out[2]};
}

template <class R, class Graph, class Fn, class... Args>
R traced_call(Op op, Graph graph, Fn&& f, const Args&... args) {
  if (F::getDynamicLayerStack().empty()) {
    count(Event::traced_as_written, op);
    return f(args...);
  }
  at::Tensor out[3];
  if (graph(args..., out)) {
    count(Event::traced_graph, op);
    return from_outputs<R>(out);
  }
  count(Event::traced_fallback, op);
  if (needs_functionalize()) return functionalize_call(std::forward<Fn>(f), args...);
  return f(args...);
}

// The formulas under their five approaches. LEGACY / MODERN: the two bodies; GRAPH: the
// generated entry point; OPNAME: approach 1's operator; SIG: the operator's C++ signature.
#define FUNCBWD_FORMULA(NAME, OP, R, LEGACY, MODERN, GRAPH, OPNAME, SIG)                   \
  template <Approach A, class... Args>                                                      \
  R NAME(const Args&... args) {                                                             \
    auto legacy_fn = [](const auto&... a) -> R { return LEGACY(a...); };                   \
    if constexpr (A == Approach::legacy) {                                                  \
      count(Event::legacy, OP);                                                             \
      return legacy_fn(args...);                                                            \
    } else if constexpr (A == Approach::handfixed) {                                        \
      count(Event::handfixed, OP);                                                          \
      return MODERN(args...);                                                               \
    } else if constexpr (A == Approach::guard) {                                            \
      return guarded(OP, legacy_fn, args...);                                               \
    } else if constexpr (A == Approach::composite) {                                        \
      static const auto op =                                                                \
          c10::Dispatcher::singleton().findSchemaOrThrow(OPNAME, "").typed<SIG>();          \
      return op.call(args...);                                                              \
    } else {                                                                                \
      return traced_call<R>(OP, GRAPH, legacy_fn, args...);                                 \
    }                                                                                       \
  }

using DiagSig = Tensor(const Tensor&, IntArrayRef, int64_t);
using IndexSelectSig = Tensor(const Tensor&, IntArrayRef, int64_t, const Tensor&);
using ValueSelectingSig = Tensor(const Tensor&, int64_t, const Tensor&, IntArrayRef, bool);
using MaskedSelectSig = Tensor(const Tensor&, const Tensor&, const Tensor&);
using ClampSig = Tensor3(const Tensor&, const Tensor&, const OptTensor&, const OptTensor&, bool);
using ProdSig = Tensor(const Tensor&, const Tensor&, const Tensor&, std::optional<int64_t>, bool);

FUNCBWD_FORMULA(diag_formula, Op::diag, Tensor, legacy::diag_backward, modern::diag_backward,
                generated::diag, "funcbwd_cpp::diag_backward", DiagSig)
FUNCBWD_FORMULA(index_select_formula, Op::index_select, Tensor, legacy::index_select_backward,
                modern::index_select_backward, generated::index_select,
                "funcbwd_cpp::index_select_backward", IndexSelectSig)
FUNCBWD_FORMULA(value_selecting_formula, Op::value_selecting, Tensor,
                legacy::value_selecting_reduction_backward,
                modern::value_selecting_reduction_backward, generated::value_selecting,
                "funcbwd_cpp::value_selecting_reduction_backward", ValueSelectingSig)
FUNCBWD_FORMULA(masked_select_formula, Op::masked_select, Tensor, legacy::masked_select_backward,
                modern::masked_select_backward, generated::masked_select,
                "funcbwd_cpp::masked_select_backward", MaskedSelectSig)
FUNCBWD_FORMULA(clamp_formula, Op::clamp, Tensor3, combined::clamp_backward<false>,
                combined::clamp_backward<true>, generated::clamp, "funcbwd_cpp::clamp_backward",
                ClampSig)
FUNCBWD_FORMULA(prod_formula, Op::prod, Tensor, combined::prod_backward<false>,
                combined::prod_backward<true>, generated::prod, "funcbwd_cpp::prod_backward",
                ProdSig)

#undef FUNCBWD_FORMULA

}  // namespace funcbwd_cpp
