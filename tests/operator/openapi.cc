// YAML -> JSON, a CEL-subset interpreter, and the structural-schema walk.
#include "operator/openapi.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <memory>
#include <regex>
#include <stdexcept>

namespace adam::testing {

using Json = nlohmann::json;

// ---- YAML -> JSON ---------------------------------------------------------------------------

namespace {

Json ScalarToJson(const YAML::Node& n) {
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

Json NodeToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : n) out[kv.first.Scalar()] = NodeToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& x : n) out.push_back(NodeToJson(x));
      return out;
    }
    case YAML::NodeType::Scalar: return ScalarToJson(n);
    default: return nullptr;
  }
}

}  // namespace

Json YamlToJson(const std::string& yaml_text) { return NodeToJson(YAML::Load(yaml_text)); }

// ---- CEL ------------------------------------------------------------------------------------

namespace {

struct CelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Token {
  enum Kind { kIdent, kInt, kDouble, kString, kOp, kEnd } kind = kEnd;
  std::string text;
};

std::vector<Token> Lex(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::kIdent, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool dbl = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) {
        dbl |= s[j] == '.';
        ++j;
      }
      out.push_back({dbl ? Token::kDouble : Token::kInt, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      size_t j = i + 1;
      std::string text;
      while (j < s.size() && s[j] != c) {
        if (s[j] == '\\' && j + 1 < s.size()) ++j;
        text += s[j++];
      }
      if (j >= s.size()) throw CelError("unterminated string");
      out.push_back({Token::kString, text});
      i = j + 1;
    } else {
      static const char* two[] = {"||", "&&", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* t : two)
        if (s.compare(i, 2, t) == 0) op = t;
      if (std::string("|&=!<>+-*/%?:.()[],").find(c) == std::string::npos)
        throw CelError(std::string("unexpected character '") + c + "'");
      out.push_back({Token::kOp, op});
      i += op.size();
    }
  }
  out.push_back({Token::kEnd, ""});
  return out;
}

// Values are JSON; an error travels as a CelError and is absorbed by || and && as in CEL.
class Cel {
 public:
  Cel(const std::string& rule, const Json& self, const Json* old_self)
      : tokens_(Lex(rule)), self_(self), old_self_(old_self) {}

  Json Run() {
    Json v = Expr(true);
    if (Peek().kind != Token::kEnd) throw CelError("unexpected '" + Peek().text + "'");
    return v;
  }

 private:
  const Token& Peek() const { return tokens_[pos_]; }
  bool Accept(const std::string& op) {
    if (Peek().kind == Token::kOp && Peek().text == op) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(const std::string& op) {
    if (!Accept(op)) throw CelError("expected '" + op + "' at '" + Peek().text + "'");
  }

  // Every level takes `eval`: false parses without evaluating (the branch not taken).
  Json Expr(bool eval) {
    Json cond = Or(eval);
    if (!Accept("?")) return cond;
    if (eval && !cond.is_boolean()) throw CelError("?: needs a bool");
    const bool c = eval && cond.get<bool>();
    Json a = Expr(eval && c);
    Expect(":");
    Json b = Expr(eval && !c);
    return c ? a : b;
  }

  // Evaluates one operand of || or &&; an evaluation error is returned in *err (the operand's
  // tokens are then parsed again without evaluating, to continue after it).
  Json Absorb(Json (Cel::*operand)(bool), bool eval, std::string* err) {
    const size_t start = pos_;
    try {
      return (this->*operand)(eval);
    } catch (const CelError& e) {
      *err = e.what();
      pos_ = start;
      (this->*operand)(false);
      return nullptr;
    }
  }

  // a || b: true if either is true, even when the other is an error.
  Json Or(bool eval) {
    std::string err;
    Json left = Absorb(&Cel::And, eval, &err);
    while (Accept("||")) {
      std::string rerr;
      Json right = Absorb(&Cel::And, eval, &rerr);
      if (!eval) continue;
      const bool lt = err.empty() && Truth(left), rt = rerr.empty() && Truth(right);
      if (lt || rt) {
        left = true;
        err.clear();
      } else if (!err.empty() || !rerr.empty()) {
        err = err.empty() ? rerr : err;
      } else {
        left = false;
      }
    }
    if (eval && !err.empty()) throw CelError(err);
    return left;
  }

  Json And(bool eval) {
    std::string err;
    Json left = Absorb(&Cel::Rel, eval, &err);
    while (Accept("&&")) {
      std::string rerr;
      Json right = Absorb(&Cel::Rel, eval, &rerr);
      if (!eval) continue;
      const bool lf = err.empty() && !Truth(left), rf = rerr.empty() && !Truth(right);
      if (lf || rf) {
        left = false;
        err.clear();
      } else if (!err.empty() || !rerr.empty()) {
        err = err.empty() ? rerr : err;
      } else {
        left = true;
      }
    }
    if (eval && !err.empty()) throw CelError(err);
    return left;
  }

  static bool Truth(const Json& v) {
    if (!v.is_boolean()) throw CelError("expected a bool, got " + v.dump());
    return v.get<bool>();
  }

  Json Rel(bool eval) {
    Json a = Add(eval);
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (!Accept(op)) continue;
      Json b = Add(eval);
      if (!eval) return nullptr;
      const std::string o = op;
      if (o == "==") return Equal(a, b);
      if (o == "!=") return !Equal(a, b);
      int c = Compare(a, b);
      if (o == "<") return c < 0;
      if (o == "<=") return c <= 0;
      if (o == ">") return c > 0;
      return c >= 0;
    }
    return a;
  }

  static bool Equal(const Json& a, const Json& b) {
    if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
    return a == b;
  }
  static int Compare(const Json& a, const Json& b) {
    if (a.is_number() && b.is_number()) {
      const double x = a.get<double>(), y = b.get<double>();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) return a.get<std::string>().compare(b.get<std::string>());
    throw CelError("cannot compare " + a.dump() + " and " + b.dump());
  }

  Json Add(bool eval) {
    Json a = Mul(eval);
    while (true) {
      const bool plus = Accept("+");
      if (!plus && !Accept("-")) return a;
      Json b = Mul(eval);
      if (!eval) continue;
      if (plus && a.is_string() && b.is_string()) {
        a = a.get<std::string>() + b.get<std::string>();
      } else if (a.is_number_integer() && b.is_number_integer()) {
        a = plus ? a.get<int64_t>() + b.get<int64_t>() : a.get<int64_t>() - b.get<int64_t>();
      } else if (a.is_number_float() && b.is_number_float()) {
        a = plus ? a.get<double>() + b.get<double>() : a.get<double>() - b.get<double>();
      } else {
        throw CelError("no such overload: " + a.dump() + (plus ? " + " : " - ") + b.dump());
      }
    }
  }

  Json Mul(bool eval) {
    Json a = Unary(eval);
    while (true) {
      std::string op;
      for (const char* o : {"*", "/", "%"})
        if (op.empty() && Accept(o)) op = o;
      if (op.empty()) return a;
      Json b = Unary(eval);
      if (!eval) continue;
      if (a.is_number_integer() && b.is_number_integer()) {
        const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
        if ((op == "/" || op == "%") && y == 0) throw CelError("division by zero");
        a = op == "*" ? x * y : op == "/" ? x / y : x % y;
      } else if (a.is_number_float() && b.is_number_float() && op != "%") {
        const double x = a.get<double>(), y = b.get<double>();
        a = op == "*" ? x * y : x / y;
      } else {
        throw CelError("no such overload: " + a.dump() + " " + op + " " + b.dump());
      }
    }
  }

  Json Unary(bool eval) {
    if (Accept("!")) {
      Json v = Unary(eval);
      return eval ? Json(!Truth(v)) : Json();
    }
    if (Accept("-")) {
      Json v = Unary(eval);
      if (!eval) return nullptr;
      if (v.is_number_integer()) return -v.get<int64_t>();
      if (v.is_number_float()) return -v.get<double>();
      throw CelError("cannot negate " + v.dump());
    }
    return Postfix(eval);
  }

  static Json Field(const Json& v, const std::string& name) {
    if (!v.is_object()) throw CelError("no field '" + name + "' on " + v.dump());
    auto it = v.find(name);
    if (it == v.end()) throw CelError("no such key: " + name);
    return *it;
  }

  Json Postfix(bool eval) {
    Json v = Primary(eval);
    while (true) {
      if (Accept(".")) {
        if (Peek().kind != Token::kIdent) throw CelError("expected a name after '.'");
        const std::string name = tokens_[pos_++].text;
        if (Accept("(")) {
          std::vector<Json> args = Args(eval);
          if (!eval) continue;
          if (name == "matches" && args.size() == 1 && v.is_string() && args[0].is_string()) {
            v = std::regex_search(v.get<std::string>(), std::regex(args[0].get<std::string>()));
          } else if (name == "startsWith" && args.size() == 1 && v.is_string()) {
            v = v.get<std::string>().rfind(args[0].get<std::string>(), 0) == 0;
          } else {
            throw CelError("unknown method " + name);
          }
          continue;
        }
        if (eval) v = Field(v, name);
      } else if (Accept("[")) {
        Json i = Expr(eval);
        Expect("]");
        if (!eval) continue;
        if (v.is_array() && i.is_number_integer()) {
          const int64_t k = i.get<int64_t>();
          if (k < 0 || k >= int64_t(v.size())) throw CelError("index out of range");
          v = v[size_t(k)];
        } else if (v.is_object() && i.is_string()) {
          v = Field(v, i.get<std::string>());
        } else {
          throw CelError("cannot index " + v.dump());
        }
      } else {
        return v;
      }
    }
  }

  std::vector<Json> Args(bool eval) {
    std::vector<Json> out;
    if (Accept(")")) return out;
    do out.push_back(Expr(eval));
    while (Accept(","));
    Expect(")");
    return out;
  }

  Json Primary(bool eval) {
    const Token t = tokens_[pos_];
    if (t.kind == Token::kEnd) throw CelError("unexpected end");
    ++pos_;
    switch (t.kind) {
      case Token::kInt: return std::stoll(t.text);
      case Token::kDouble: return std::stod(t.text);
      case Token::kString: return t.text;
      case Token::kOp:
        if (t.text == "(") {
          Json v = Expr(eval);
          Expect(")");
          return v;
        }
        if (t.text == "[") {
          Json list = Json::array();
          if (!Accept("]")) {
            do list.push_back(Expr(eval));
            while (Accept(","));
            Expect("]");
          }
          return list;
        }
        throw CelError("unexpected '" + t.text + "'");
      default: break;
    }
    if (t.text == "true") return true;
    if (t.text == "false") return false;
    if (t.text == "null") return nullptr;
    if (t.text == "self") return self_;
    if (t.text == "oldSelf") {
      if (!old_self_) throw CelError("oldSelf outside a transition");
      return *old_self_;
    }
    if (t.text == "has") return Has(eval);
    if (t.text == "size" || t.text == "string" || t.text == "int") {
      Expect("(");
      std::vector<Json> args = Args(eval);
      if (!eval) return nullptr;
      if (args.size() != 1) throw CelError(t.text + " takes one argument");
      const Json& a = args[0];
      if (t.text == "size") {
        if (a.is_string() || a.is_array() || a.is_object()) {
          return int64_t(a.is_string() ? a.get<std::string>().size() : a.size());
        }
        throw CelError("size of " + a.dump());
      }
      if (t.text == "string") return a.is_string() ? a : Json(a.dump());
      if (a.is_number()) return int64_t(a.get<double>());
      return std::stoll(a.get<std::string>());
    }
    throw CelError("undeclared reference '" + t.text + "'");
  }

  // has(x.f): whether x has field f (x itself must exist).
  Json Has(bool eval) {
    Expect("(");
    Json v = Primary(eval);
    std::string last;
    while (Accept(".")) {
      if (Peek().kind != Token::kIdent) throw CelError("expected a name after '.'");
      if (!last.empty() && eval) v = Field(v, last);
      last = tokens_[pos_++].text;
    }
    Expect(")");
    if (last.empty()) throw CelError("has() needs a field selection");
    if (!eval) return nullptr;
    return v.is_object() && v.contains(last);
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const Json& self_;
  const Json* old_self_;
};

}  // namespace

std::string EvalCel(const std::string& rule, const Json& self, const Json* old_self) {
  try {
    Cel cel(rule, self, old_self);
    const Json v = cel.Run();
    if (!v.is_boolean()) return "error: the rule gives " + v.dump() + ", not a bool";
    return v.get<bool>() ? "true" : "false";
  } catch (const CelError& e) {
    return std::string("error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

// ---- schema ---------------------------------------------------------------------------------

namespace {

class Validator {
 public:
  std::vector<std::string> errors;

  void Check(const Json& schema, const Json& v, const Json* old, const std::string& path) {
    const bool int_or_string = schema.value("x-kubernetes-int-or-string", false);
    const std::string type = schema.value("type", "");
    if (int_or_string) {
      if (!v.is_number_integer() && !v.is_string())
        return Error(path, "must be an integer or a string");
    } else if (type == "object") {
      if (!v.is_object()) return Error(path, "must be an object");
    } else if (type == "array") {
      if (!v.is_array()) return Error(path, "must be an array");
    } else if (type == "string") {
      if (!v.is_string()) return Error(path, "must be a string");
    } else if (type == "integer") {
      if (!v.is_number_integer()) return Error(path, "must be an integer");
    } else if (type == "number") {
      if (!v.is_number()) return Error(path, "must be a number");
    } else if (type == "boolean") {
      if (!v.is_boolean()) return Error(path, "must be a boolean");
    }
    if (schema.contains("enum")) {
      bool found = false;
      for (const auto& e : schema["enum"]) found |= e == v;
      if (!found) Error(path, "must be one of " + schema["enum"].dump() + ", got " + v.dump());
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (schema.contains("minimum")) {
        const double lo = schema["minimum"].get<double>();
        const bool excl = schema.value("exclusiveMinimum", false);
        if (excl ? !(x > lo) : !(x >= lo))
          Error(path, std::string("must be ") + (excl ? "> " : ">= ") + schema["minimum"].dump());
      }
      if (schema.contains("maximum")) {
        const double hi = schema["maximum"].get<double>();
        const bool excl = schema.value("exclusiveMaximum", false);
        if (excl ? !(x < hi) : !(x <= hi))
          Error(path, std::string("must be ") + (excl ? "< " : "<= ") + schema["maximum"].dump());
      }
      if (schema.contains("multipleOf") && std::fmod(x, schema["multipleOf"].get<double>()) != 0)
        Error(path, "must be a multiple of " + schema["multipleOf"].dump());
    }
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (schema.contains("pattern") &&
          !std::regex_search(s, std::regex(schema["pattern"].get<std::string>())))
        Error(path, "must match " + schema["pattern"].get<std::string>() + ", got '" + s + "'");
      if (schema.contains("minLength") && s.size() < schema["minLength"].get<size_t>())
        Error(path, "must be at least " + schema["minLength"].dump() + " characters");
      if (schema.contains("maxLength") && s.size() > schema["maxLength"].get<size_t>())
        Error(path, "must be at most " + schema["maxLength"].dump() + " characters");
    }
    if (v.is_array()) {
      if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>())
        Error(path, "must have at least " + schema["minItems"].dump() + " items");
      if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>())
        Error(path, "must have at most " + schema["maxItems"].dump() + " items");
      if (schema.contains("items"))
        for (size_t i = 0; i < v.size(); ++i) {
          const Json* o = old && old->is_array() && i < old->size() ? &(*old)[i] : nullptr;
          Check(schema["items"], v[i], o, path + "[" + std::to_string(i) + "]");
        }
    }
    if (v.is_object() && type == "object") {
      const Json props = schema.value("properties", Json::object());
      for (const auto& r : schema.value("required", Json::array()))
        if (!v.contains(r.get<std::string>())) Error(Join(path, r.get<std::string>()), "required");
      const bool preserve = schema.value("x-kubernetes-preserve-unknown-fields", false);
      for (auto it = v.begin(); it != v.end(); ++it) {
        const Json* o = old && old->is_object() && old->contains(it.key()) ? &(*old)[it.key()]
                                                                            : nullptr;
        if (props.contains(it.key())) {
          Check(props[it.key()], it.value(), o, Join(path, it.key()));
        } else if (schema.contains("additionalProperties") &&
                   schema["additionalProperties"].is_object()) {
          Check(schema["additionalProperties"], it.value(), o, Join(path, it.key()));
        } else if (!preserve && !(path.empty() && it.key() == "metadata") &&
                   !props.empty()) {
          Error(Join(path, it.key()), "unknown field");
        }
      }
    }
    for (const auto& rule : schema.value("x-kubernetes-validations", Json::array())) {
      const std::string expr = rule["rule"].get<std::string>();
      const bool transition = expr.find("oldSelf") != std::string::npos;
      if (transition && !old) continue;  // transition rules apply to updates only
      const std::string r = EvalCel(expr, v, old);
      if (r == "true") continue;
      Error(path.empty() ? "(root)" : path,
            rule.value("message", "failed rule: " + expr) +
                (r == "false" ? "" : " (" + r + ")"));
    }
  }

 private:
  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  void Error(const std::string& path, const std::string& msg) {
    errors.push_back(path + ": " + msg);
  }
};

}  // namespace

std::vector<std::string> ValidateAgainstSchema(const Json& schema, const Json& object,
                                               const Json* old_object) {
  Validator v;
  v.Check(schema, object, old_object, "");
  return v.errors;
}

}  // namespace adam::testing
