#include "spec/yaml_json.h"

#include <regex>
#include <stdexcept>

namespace adam::spec {

nlohmann::json YamlNodeToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& kv : n) out[kv.first.Scalar()] = YamlNodeToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& x : n) out.push_back(YamlNodeToJson(x));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() != "?") return s;  // quoted or explicitly tagged: a string
      static const std::regex integer("^[-+]?[0-9]+$");
      static const std::regex number("^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$");
      if (s == "null" || s == "Null" || s == "NULL" || s == "~" || s.empty()) return nullptr;
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (std::regex_match(s, integer)) {
        try {
          return std::stoll(s);
        } catch (const std::out_of_range&) {
          return std::stod(s);
        }
      }
      if (std::regex_match(s, number)) return std::stod(s);
      return s;
    }
    default:
      return nullptr;
  }
}

nlohmann::json YamlToJson(const std::string& yaml_text) {
  return YamlNodeToJson(YAML::Load(yaml_text));
}

}  // namespace adam::spec
