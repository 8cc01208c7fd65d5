// WatchDecoder.
#include "kube/watch.h"

namespace adam::kube {

StatusOr<WatchEvent> WatchDecoder::Decode(const std::string& line) {
  ++lines_;
  const std::string where = "watch stream line " + std::to_string(lines_);
  Json j;
  try {
    j = Json::parse(line);
  } catch (const Json::parse_error& e) {
    return DataLossError(where + ": not JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const Json::exception& e) {  // e.g. a number out of range
    return DataLossError(where + ": " + e.what());
  }
  if (!j.is_object()) return DataLossError(where + ": not a JSON object");
  auto type = j.find("type");
  if (type == j.end() || !type->is_string())
    return DataLossError(where + ": no string field 'type'");
  WatchEvent ev;
  ev.type = type->get<std::string>();
  if (ev.type != "ADDED" && ev.type != "MODIFIED" && ev.type != "DELETED" &&
      ev.type != "BOOKMARK" && ev.type != "ERROR")
    return DataLossError(where + ": unknown event type '" + ev.type.substr(0, 64) + "'");
  auto object = j.find("object");
  if (object == j.end() || !object->is_object())
    return DataLossError(where + ": field 'object' must be an object");
  ev.object = std::move(*object);
  if (ev.type != "ERROR") {
    auto md = ev.object.find("metadata");
    if (md == ev.object.end() || !md->is_object())
      return DataLossError(where + ": object.metadata must be an object");
    auto rv = md->find("resourceVersion");
    if (rv == md->end() || !rv->is_string())
      return DataLossError(where + ": object.metadata.resourceVersion must be a string");
  }
  return ev;
}

Status WatchErrorStatus(const Json& status_object) {
  int code = 0;
  std::string message = "watch error";
  if (status_object.is_object()) {
    if (auto c = status_object.find("code"); c != status_object.end() && c->is_number_integer())
      code = c->get<int>();
    if (auto m = status_object.find("message"); m != status_object.end() && m->is_string())
      message = m->get<std::string>();
  }
  if (code == 410) return OutOfRangeError("watch: " + message + " (410 Gone: list again)");
  return UnavailableError("watch: " + message +
                          (code ? " (code " + std::to_string(code) + ")" : ""));
}

}  // namespace adam::kube
