#ifndef BITPARITY_TESTS_SUPPORT_REPORT_JSON_H_
#define BITPARITY_TESTS_SUPPORT_REPORT_JSON_H_

// Reading a `bitparity run` report.json in end-to-end tests.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace bitparity::testing {

// The check named `name` in `report`'s "checks"; a test failure (and an empty object) when the
// report has none.
inline const nlohmann::json& CheckNamed(const nlohmann::json& report, const std::string& name) {
  for (const nlohmann::json& c : report["checks"]) {
    if (c["name"] == name) return c;
  }
  static const nlohmann::json none;
  ADD_FAILURE() << "no check '" << name << "' in " << report.dump(2);
  return none;
}

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_REPORT_JSON_H_
