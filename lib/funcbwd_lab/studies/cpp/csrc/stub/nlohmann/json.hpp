// A stand-in for nlohmann/json.hpp, which the torch wheel's headers include but do not ship.
//
// ATen/functorch/Interpreter.h (included by DynamicLayer.h) includes <nlohmann/json.hpp> for
// Interpreter::serialize() / deserialize() and its to_json / from_json templates only. This
// extension never calls them; the declarations below are what those inline members need to
// compile. Calling either one throws. (docs/cpp.md: "Building against the wheel".)
#pragma once
#include <stdexcept>
#include <string>

namespace nlohmann {
class json {
 public:
  json() = default;
  template <typename T>
  json(const T&) {}
  std::string dump() const { throw std::logic_error("funcbwd_cpp: nlohmann::json is a stub"); }
  static json parse(const std::string&) {
    throw std::logic_error("funcbwd_cpp: nlohmann::json is a stub");
  }
  template <typename T>
  T get() const {
    throw std::logic_error("funcbwd_cpp: nlohmann::json is a stub");
  }
};
}  // namespace nlohmann
