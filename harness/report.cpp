#include "harness/report.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <pugixml.hpp>
#include <sstream>

#include "core/errors.h"

namespace bitparity {

std::string UtcTimestamp() {
  std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));
  return buffer;
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(temporary, ec);
      throw InfrastructureError(path + ": cannot write the report");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::error_code ec;
    std::filesystem::remove(temporary, ec);
    throw InfrastructureError(path + ": cannot move the report into place: " + std::strerror(err));
  }
}

void WriteJunit(const std::string& path, const std::vector<SuiteReport>& suites) {
  pugi::xml_document doc;
  auto decl = doc.append_child(pugi::node_declaration);
  decl.append_attribute("version") = "1.0";
  decl.append_attribute("encoding") = "UTF-8";
  pugi::xml_node root = doc.append_child("testsuites");
  root.append_attribute("name") = "bitparity";
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  double seconds = 0;
  for (const SuiteReport& suite : suites) {
    pugi::xml_node s = root.append_child("testsuite");
    int s_failures = 0, s_errors = 0, s_skipped = 0;
    for (const CheckResult& c : suite.checks) {
      s_failures += c.verdict == Verdict::kFail;
      s_errors += c.verdict == Verdict::kError;
      s_skipped += c.verdict == Verdict::kSkipped;
    }
    s.append_attribute("name") = suite.name.c_str();
    s.append_attribute("tests") = static_cast<int>(suite.checks.size());
    s.append_attribute("failures") = s_failures;
    s.append_attribute("errors") = s_errors;
    s.append_attribute("skipped") = s_skipped;
    s.append_attribute("time") = suite.seconds;
    s.append_attribute("timestamp") = suite.timestamp.c_str();
    if (!suite.properties.empty()) {
      pugi::xml_node props = s.append_child("properties");
      for (const auto& [key, value] : suite.properties) {
        pugi::xml_node p = props.append_child("property");
        p.append_attribute("name") = key.c_str();
        p.append_attribute("value") = value.c_str();
      }
    }
    for (const CheckResult& c : suite.checks) {
      pugi::xml_node t = s.append_child("testcase");
      t.append_attribute("classname") = ("bitparity." + suite.name).c_str();
      t.append_attribute("name") = c.name.c_str();
      t.append_attribute("time") = 0.0;
      const std::string body = c.details.empty() ? c.summary : c.summary + "\n" + c.details;
      if (c.verdict == Verdict::kFail) {
        pugi::xml_node f = t.append_child("failure");
        f.append_attribute("message") = c.summary.c_str();
        f.append_attribute("type") = "bitparity.mismatch";
        f.append_child(pugi::node_pcdata).set_value(body.c_str());
      } else if (c.verdict == Verdict::kError) {
        pugi::xml_node e = t.append_child("error");
        e.append_attribute("message") = c.summary.c_str();
        e.append_attribute("type") = "bitparity.infrastructure";
        e.append_child(pugi::node_pcdata).set_value(body.c_str());
      } else if (c.verdict == Verdict::kSkipped) {
        t.append_child("skipped").append_attribute("message") = c.summary.c_str();
      } else {
        t.append_child("system-out").append_child(pugi::node_pcdata).set_value(body.c_str());
      }
    }
    tests += static_cast<int>(suite.checks.size());
    failures += s_failures;
    errors += s_errors;
    skipped += s_skipped;
    seconds += suite.seconds;
  }
  root.append_attribute("tests") = tests;
  root.append_attribute("failures") = failures;
  root.append_attribute("errors") = errors;
  root.append_attribute("skipped") = skipped;
  root.append_attribute("time") = seconds;
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_default, pugi::encoding_utf8);
  WriteFileAtomically(path, out.str());
}

void WriteJson(const std::string& path, const nlohmann::json& document) {
  WriteFileAtomically(path, document.dump(2) + "\n");
}

std::string FormatChecks(const std::vector<CheckResult>& checks) {
  size_t width = 5;
  for (const CheckResult& c : checks) width = std::max(width, c.name.size());
  std::ostringstream out;
  char line[64];
  for (const CheckResult& c : checks) {
    const char* verdict = c.verdict == Verdict::kPass      ? "PASS"
                          : c.verdict == Verdict::kFail    ? "FAIL"
                          : c.verdict == Verdict::kSkipped ? "SKIP"
                                                           : "ERROR";
    std::snprintf(line, sizeof(line), "  %-5s  ", verdict);
    out << line << c.name << std::string(width - c.name.size(), ' ') << "  " << c.summary << "\n";
  }
  return out.str();
}

}  // namespace bitparity
