// An offline check of objects against a CustomResourceDefinition's schema, as the API server
// would make it: OpenAPI v3 structural schemas (type, properties, required, enum, bounds, pattern,
// lengths, items, additionalProperties, int-or-string), unknown fields refused (kubectl's strict
// field validation), defaults, and the x-kubernetes-validations CEL rules, evaluated by a small
// interpreter of the CEL subset our CRDs use (field selection, has(), size(), matches(), indexing,
// arithmetic, comparison, logic, ?:; oldSelf for transition rules).
//
// Test support: no cluster is needed to know that the CRD accepts every example and refuses the
// documented bad manifests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace adam::testing {

// Converts a YAML document to JSON, typing plain scalars as YAML 1.2's core schema does (int,
// float, bool, null, else string); quoted scalars stay strings.
nlohmann::json YamlToJson(const std::string& yaml_text);

// Evaluates one CEL expression with `self` (and `oldSelf` when non-null). Returns "true",
// "false", or "error: ..." for an evaluation or syntax error.
std::string EvalCel(const std::string& rule, const nlohmann::json& self,
                    const nlohmann::json* old_self = nullptr);

// Validates `object` against `schema` (an openAPIV3Schema). Returns every problem as
// "path: message"; empty when valid. `old_object` (may be null) enables transition rules.
std::vector<std::string> ValidateAgainstSchema(const nlohmann::json& schema,
                                               const nlohmann::json& object,
                                               const nlohmann::json* old_object = nullptr);

}  // namespace adam::testing
