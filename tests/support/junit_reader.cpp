#include "tests/support/junit_reader.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/test_support.h"

namespace bitparity::testing {

std::unique_ptr<Junit> ReadJunit(const std::string& path) {
  auto junit = std::make_unique<Junit>();
  EXPECT_TRUE(junit->doc.load_file(path.c_str())) << path;
  for (const pugi::xpath_node& node : junit->doc.select_nodes("//testcase")) {
    pugi::xml_node tc = node.node();
    std::string verdict = "pass", message;
    for (const char* kind : {"failure", "error", "skipped"}) {
      if (pugi::xml_node child = tc.child(kind)) {
        verdict = kind;
        message = child.attribute("message").value();
      }
    }
    junit->cases[tc.attribute("name").value()] = {verdict, message};
  }
  return junit;
}

void ExpectValidJunit(const std::string& path) {
  TempDir dir;
  const std::string log = dir.File("xmllint.log");
  const std::string command = "xmllint --noout --schema " + SourceDir() + "/tests/data/junit.xsd " +
                              path + " > " + log + " 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << ReadFile(log);
}

}  // namespace bitparity::testing
