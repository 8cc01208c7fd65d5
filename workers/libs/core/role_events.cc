#include "core/role_events.h"

#include <type_traits>

#include "core/event.h"

namespace adam::events {
namespace {

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

template <class T>
nlohmann::json ToObject(const T& value);

// One field onto the wire: an absent optional writes no key.
template <class F>
void Put(nlohmann::json& j, const char* key, const F& field) {
  if constexpr (IsOptional<F>::value) {
    if (field) j[key] = *field;
  } else if constexpr (IsVector<F>::value) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& item : field) {
      if constexpr (std::is_class_v<typename F::value_type>)
        list.push_back(ToObject(item));
      else
        list.push_back(item);
    }
    j[key] = std::move(list);
  } else {
    j[key] = field;
  }
}

template <class T>
void ReadObject(const nlohmann::json& j, T* out);

// One element of a list: nullopt when it is not of the element's type (the element dropped).
template <class E>
std::optional<E> Element(const nlohmann::json& item) {
  if constexpr (std::is_class_v<E>) {
    if (!item.is_object()) return std::nullopt;
    E e;
    ReadObject(item, &e);
    return e;
  } else {
    if (!item.is_number_integer()) return std::nullopt;
    if constexpr (std::is_unsigned_v<E>) {
      if (item.is_number_unsigned()) return E(item.get<uint64_t>());
      return item.get<int64_t>() >= 0 ? std::optional<E>(E(item.get<int64_t>())) : std::nullopt;
    }
    return E(item.get<int64_t>());
  }
}

// One field off the wire: left as it is when absent or of another type.
template <class F>
void Take(const nlohmann::json& j, const char* key, F* field) {
  auto it = j.find(key);
  if (it == j.end()) return;
  if constexpr (IsOptional<F>::value) {
    if (auto v = EventNumberIf(j, key)) *field = *v;
  } else if constexpr (IsVector<F>::value) {
    if (!it->is_array()) return;
    field->clear();
    for (const auto& item : *it)
      if (auto e = Element<typename F::value_type>(item)) field->push_back(std::move(*e));
  } else if constexpr (std::is_same_v<F, std::string>) {
    if (it->is_string()) *field = it->get<std::string>();
  } else if constexpr (std::is_same_v<F, bool>) {
    if (it->is_boolean()) *field = it->get<bool>();
  } else if constexpr (std::is_floating_point_v<F>) {
    *field = F(EventNumber(j, key, double(*field)));
  } else {
    static_assert(std::is_integral_v<F>, "an event field is a number, string, bool or list");
    if constexpr (std::is_unsigned_v<F>) {
      // Beyond int64's range only as an unsigned number; a negative one is dropped.
      if (it->is_number_unsigned()) {
        *field = F(it->get<uint64_t>());
      } else if (const int64_t v = EventInt(j, key, -1); v >= 0) {
        *field = F(v);
      }
    } else {
      *field = F(EventInt(j, key, int64_t(*field)));
    }
  }
}

template <class T>
nlohmann::json ToObject(const T& value) {
  nlohmann::json j = nlohmann::json::object();
  T::Fields(value, [&j](const char* key, const auto& field) { Put(j, key, field); });
  return j;
}

template <class T>
void ReadObject(const nlohmann::json& j, T* out) {
  T::Fields(*out, [&j](const char* key, auto& field) { Take(j, key, &field); });
}

// The further listeners of a ready event: every integer key the struct does not name.
void ReadPorts(const nlohmann::json& j, Ready* ready) {
  for (const auto& [key, value] : j.items())
    if (key != "event" && key != "port" && key != "metrics_port" && value.is_number_integer())
      ready->ports[key] = value.get<int>();
}

template <size_t I = 0>
std::optional<RoleEvent> ByKind(const std::string& kind, const nlohmann::json& j) {
  if constexpr (I == std::variant_size_v<RoleEvent>) {
    return std::nullopt;
  } else {
    using T = std::variant_alternative_t<I, RoleEvent>;
    if (kind != T::kKind) return ByKind<I + 1>(kind, j);
    T event;
    ReadObject(j, &event);
    if constexpr (std::is_same_v<T, Ready>) ReadPorts(j, &event);
    return RoleEvent(std::move(event));
  }
}

}  // namespace

nlohmann::json ToJson(const RoleEvent& event) {
  return std::visit(
      [](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        nlohmann::json j = {{"event", T::kKind}};
        j.update(ToObject(e));
        if constexpr (std::is_same_v<T, Ready>)
          for (const auto& [name, port] : e.ports) j[name] = port;
        return j;
      },
      event);
}

std::optional<RoleEvent> FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find("event");
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return ByKind(it->get<std::string>(), j);
}

std::optional<RoleEvent> ParseLine(const std::string& line) {
  auto j = ParseEvent(line);
  if (!j) return std::nullopt;
  return FromJson(*j);
}

void Emit(const RoleEvent& event) { EmitEvent(ToJson(event)); }

std::string_view KindOf(const RoleEvent& event) {
  return std::visit(
      [](const auto& e) { return std::string_view(std::decay_t<decltype(e)>::kKind); }, event);
}

std::vector<std::string_view> Kinds() {
  std::vector<std::string_view> kinds;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (kinds.push_back(std::variant_alternative_t<I, RoleEvent>::kKind), ...);
  }
  (std::make_index_sequence<std::variant_size_v<RoleEvent>>());
  return kinds;
}

}  // namespace adam::events
