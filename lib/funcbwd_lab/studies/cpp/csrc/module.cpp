// The Python side of the extension: the provenance counters, whole-backward functionalization
// around a Python vjp_fn, and the probe behind "a TLS include of Functionalize is not enough".
#include <torch/extension.h>

#include "approaches.h"

namespace funcbwd_cpp {

int64_t* counter_table() {
  thread_local int64_t table[kEvents * kOps] = {};
  return table;
}

int64_t& open_scopes() {
  thread_local int64_t open = 0;
  return open;
}

namespace {

std::vector<int64_t> counters() {
  const int64_t* t = counter_table();
  return std::vector<int64_t>(t, t + kEvents * kOps);
}

// whole: fn(*args) under one Functionalize layer when a vmap level is active, as written
// otherwise. args: tensors, or tuples/lists of tensors (a vjp_fn's cotangents); every tensor
// in them is wrapped, every tensor in the result (a tensor, or a tuple/list of tensors and
// Nones) synced and unwrapped. The layer is popped whatever fn raises.
py::object wrap_tree(const FunctionalizeScope& scope, const py::handle& obj) {
  if (THPVariable_Check(obj.ptr())) return py::cast(scope.wrap(THPVariable_Unpack(obj.ptr())));
  if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
    py::list out;
    for (auto item : obj) out.append(wrap_tree(scope, item));
    return py::isinstance<py::tuple>(obj) ? py::object(py::tuple(out)) : py::object(out);
  }
  return py::reinterpret_borrow<py::object>(obj);
}

py::object unwrap_tree(const py::handle& obj) {
  if (THPVariable_Check(obj.ptr()))
    return py::cast(FunctionalizeScope::unwrap(THPVariable_Unpack(obj.ptr())));
  if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
    py::list out;
    for (auto item : obj) out.append(unwrap_tree(item));
    return py::isinstance<py::tuple>(obj) ? py::object(py::tuple(out)) : py::object(out);
  }
  return py::reinterpret_borrow<py::object>(obj);
}

py::object whole_call(const py::function& fn, const py::tuple& args) {
  if (!needs_functionalize()) {
    count(Event::whole_as_written, Op::diag);
    return fn(*args);
  }
  count(Event::whole_functionalized, Op::diag);
  FunctionalizeScope scope;
  py::tuple wrapped = wrap_tree(scope, args);
  py::object out = fn(*wrapped);
  return unwrap_tree(out);
}

// The guard without the layer: DispatchKey::Functionalize included in the TLS around diag's
// legacy formula, with the grad wrapped at no level. Under vmap it raises vmap's in-place error
// (the vmap layer excludes the key when it processes an op): the probe the study runs.
Tensor naive_guard_probe(const Tensor& grad, std::vector<int64_t> sizes, int64_t diagonal) {
  c10::impl::IncludeDispatchKeyGuard include(c10::DispatchKey::Functionalize);
  return legacy::diag_backward(grad, sizes, diagonal);
}

// The cost of one backward node in C++, without the engine or Python: y's node (ours or
// torch's own) applied n times to grads, in a C++ loop; with whole, each application is one
// backward pass under whole's Functionalize layer (when a vmap level is active, as whole_call).
// Called inside vmap, the grads are batched and the node runs under that vmap level.
std::vector<Tensor> node_loop(const Tensor& y, const std::vector<Tensor>& grads, int64_t n,
                              bool whole) {
  const auto& node = y.grad_fn();
  TORCH_CHECK(node, "node_loop: the tensor has no grad_fn");
  TORCH_CHECK(static_cast<size_t>(node->num_inputs()) == grads.size(), "node_loop: ",
              node->name(), " takes ", node->num_inputs(), " grads, got ", grads.size());
  torch::autograd::variable_list out;
  for (int64_t i = 0; i < n; ++i) {
    if (whole && needs_functionalize()) {
      count(Event::whole_functionalized, Op::diag);
      FunctionalizeScope scope;
      torch::autograd::variable_list wrapped;
      for (const auto& g : grads) wrapped.push_back(scope.wrap(g));
      out = (*node)(std::move(wrapped));
      for (auto& o : out) o = FunctionalizeScope::unwrap(o);
    } else {
      if (whole) count(Event::whole_as_written, Op::diag);
      out = (*node)(torch::autograd::variable_list(grads.begin(), grads.end()));
    }
  }
  return std::vector<Tensor>(out.begin(), out.end());
}

// What each approach's trigger costs per formula call with no functorch transform active, alone:
// n evaluations in a C++ loop (callgrind counts it). "vmap": the guard's and whole's test
// (needs_functionalize); "stack": traced's (the functorch stack is empty).
int64_t trigger_loop(int64_t n, const std::string& which) {
  int64_t hits = 0;
  bool vmap = which == "vmap";
  TORCH_CHECK(vmap || which == "stack", "trigger_loop: 'vmap' or 'stack', got ", which);
  for (int64_t i = 0; i < n; ++i) {
    bool hit = vmap ? needs_functionalize() : F::getDynamicLayerStack().empty();
    hits += hit;
    asm volatile("" : : "r"(hits) : "memory");  // keep every evaluation
  }
  return hits;
}

// The guard with only the gradient wrapped (as hooks and whole functionalize: the tensors a node
// saved are not functional): masked_select's formula builds its buffer from the saved input,
// and masked_scatter_ of the functional grad into it fails functionalization's assert.
Tensor grad_only_probe(const Tensor& grad, const Tensor& input, const Tensor& mask) {
  FunctionalizeScope scope;
  return FunctionalizeScope::unwrap(legacy::masked_select_backward(scope.wrap(grad), input, mask));
}

// The guard unwrapping without a sync: diag's formula writes through a view of its buffer, so
// the buffer's wrapper holds a pending update that only sync applies; its value() is then the
// zeros it started as. Silently wrong, not an error.
Tensor no_sync_probe(const Tensor& grad, std::vector<int64_t> sizes, int64_t diagonal) {
  FunctionalizeScope scope;
  Tensor out = legacy::diag_backward(scope.wrap(grad), sizes, diagonal);
  return FI::unsafeGetFunctionalWrapper(out)->value();
}

}  // namespace
}  // namespace funcbwd_cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace funcbwd_cpp;
  m.doc() = "funcbwd's C++ study: the approaches of functorch#241 in C++ (docs/cpp.md)";
  m.def("counters", &counters, "thread-local event counts (events x formulas, row-major)");
#define FUNCBWD_NAME(name) #name,
  m.attr("events") = std::vector<std::string>{FUNCBWD_EVENTS(FUNCBWD_NAME)};
  m.attr("formulas") = std::vector<std::string>{FUNCBWD_FORMULAS(FUNCBWD_NAME)};
#undef FUNCBWD_NAME
  m.def("open_scopes", [] { return open_scopes(); },
        "Functionalize layers / reopened vmap fronts not yet closed on this thread");
  m.def("vmap_active", &vmap_active);
  m.def("whole_call", &whole_call, "fn(*args), under a Functionalize layer iff vmap is active");
  m.def("node_loop", &node_loop, "y's backward node applied n times in C++ (whole: per pass)");
  m.def("trigger_loop", &trigger_loop, "n evaluations of a trigger (vmap | stack) in C++");
  m.def("naive_guard_probe", &naive_guard_probe, "the guard as a TLS include only (diag)");
  m.def("grad_only_probe", &grad_only_probe, "the guard wrapping grad only (masked_select)");
  m.def("no_sync_probe", &no_sync_probe, "the guard unwrapping without sync (diag)");
  m.def("graph_count", &generated::graph_count, "graphs generated for a formula (Op order)");
}
