// A YAML document or node as JSON, typing plain scalars as YAML 1.2's core schema does (int,
// float, bool, null, else string); quoted or tagged scalars stay strings. For the parts of a
// manifest that are passed through to Kubernetes as they are (a volume source), and for tests,
// whose examples, golden files and bad-manifest catalogue are YAML.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>

namespace adam::spec {

nlohmann::json YamlNodeToJson(const YAML::Node& n);
// Throws YAML::Exception for text that is not YAML.
nlohmann::json YamlToJson(const std::string& yaml_text);

}  // namespace adam::spec
