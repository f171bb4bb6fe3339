#ifndef BITPARITY_TESTS_SUPPORT_JUNIT_READER_H_
#define BITPARITY_TESTS_SUPPORT_JUNIT_READER_H_

// Reading the junit.xml a run or matrix wrote, as a CI server would: every testcase's verdict and
// message, and the file validated against tests/data/junit.xsd.

#include <map>
#include <memory>
#include <pugixml.hpp>
#include <string>
#include <utility>

namespace bitparity::testing {

struct Junit {
  pugi::xml_document doc;
  // name -> "pass" / "failure" / "error" / "skipped", plus the message.
  std::map<std::string, std::pair<std::string, std::string>> cases;
};

// Parses `path` (a failed parse is a test failure) and collects its testcases.
std::unique_ptr<Junit> ReadJunit(const std::string& path);

// `path` validates against the project's JUnit schema (xmllint), else a test failure.
void ExpectValidJunit(const std::string& path);

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_JUNIT_READER_H_
