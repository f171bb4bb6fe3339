#ifndef BITPARITY_CORE_ENUM_NAMES_H_
#define BITPARITY_CORE_ENUM_NAMES_H_

// One name table per enum: every value with its spelling, read both ways. ToString prints
// through the table and the recipe reader parses through it, so a value's name is written once.
//
//   constexpr EnumName<Dispatcher> kDispatcherNames[] = {{Dispatcher::kAllToAll, "alltoall"},
//                                                        {Dispatcher::kFlex, "flex"}};
//   const char* ToString(Dispatcher d) { return NameIn(kDispatcherNames, d); }

#include <cstddef>
#include <optional>
#include <string>

namespace bitparity {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `names`; "?" when the table lacks it.
template <typename E, size_t N>
constexpr const char* NameIn(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// The value named `name` in `names`, or nullopt.
template <typename E, size_t N>
std::optional<E> ValueIn(const EnumName<E> (&names)[N], const std::string& name) {
  for (const EnumName<E>& n : names) {
    if (name == n.name) return n.value;
  }
  return std::nullopt;
}

// The names of `names` for a message: "\"alltoall\", \"flex\"".
template <typename E, size_t N>
std::string QuotedNames(const EnumName<E> (&names)[N]) {
  std::string out;
  for (const EnumName<E>& n : names)
    out += (out.empty() ? "\"" : ", \"") + std::string(n.name) + "\"";
  return out;
}

}  // namespace bitparity

#endif  // BITPARITY_CORE_ENUM_NAMES_H_
