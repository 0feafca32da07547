// A stand-in for nlohmann/json.hpp, which torch's installed ATen/functorch/Interpreter.h includes
// but the wheel does not ship. Interpreter.h needs it for (de)serializing interpreters, which the
// kernels built here never do: to_json/from_json are templates they never instantiate, and
// Interpreter::serialize/deserialize, the two non-template uses, only need these names to
// compile; calling them through this stand-in raises. The extension is compiled with
// -fvisibility-inlines-hidden, so these inline definitions never replace libtorch's own.
#pragma once
#include <stdexcept>
#include <string>

namespace nlohmann {
struct json {
  json() = default;
  template <typename T>
  explicit json(const T&) {}
  std::string dump() const {
    throw std::runtime_error("funcbwd_prs: functorch interpreters are not serializable here");
  }
  static json parse(const std::string&) {
    throw std::runtime_error("funcbwd_prs: functorch interpreters are not serializable here");
  }
  template <typename T>
  T get() const {
    throw std::runtime_error("funcbwd_prs: functorch interpreters are not serializable here");
  }
};
}  // namespace nlohmann
