// Event lines between a role and its launcher: any number survives the trip, NaN and infinities
// included (JSON has none), and no field of an unexpected type can make the reader throw.
#include "core/event.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace adam {
namespace {

using Json = nlohmann::json;

TEST(Event, NonFiniteNumbersSurviveTheTrip) {
  const double inf = std::numeric_limits<double>::infinity();
  const Json sent = {{"event", "epoch"},
                     {"loss", std::nan("")},
                     {"up", inf},
                     {"down", -inf},
                     {"nested", {{"x", std::nan("")}}},
                     {"list", {1.5, inf}},
                     {"ok", 0.25}};
  const std::string line = std::string(kEventPrefix) + FiniteJson(sent).dump();
  auto got = ParseEvent(line);
  ASSERT_TRUE(got.has_value()) << line;
  EXPECT_TRUE(std::isnan(EventNumber(*got, "loss", 0)));
  EXPECT_EQ(EventNumber(*got, "up", 0), inf);
  EXPECT_EQ(EventNumber(*got, "down", 0), -inf);
  EXPECT_EQ(EventNumber(*got, "ok", 0), 0.25);
  EXPECT_EQ((*got)["nested"]["x"], "NaN");
  EXPECT_EQ((*got)["list"][1], "Infinity");
  // nlohmann's own rendering of NaN, from an older writer: null.
  EXPECT_TRUE(std::isnan(EventNumber(Json::parse(R"({"loss": null})"), "loss", 0)));
}

TEST(Event, FieldsOfTheWrongTypeFallBackWithoutThrowing) {
  const Json ev = Json::parse(R"({"event": 7, "port": "eighty", "epoch": 1e300, "trainer": [1],
                                  "images_total": 12345678901234})");
  EXPECT_EQ(EventString(ev, "event", "none"), "none");
  EXPECT_EQ(EventInt(ev, "port", -1), -1);
  EXPECT_EQ(EventInt(ev, "epoch", -1), -1);  // out of an integer's range
  EXPECT_EQ(EventInt(ev, "trainer", -1), -1);
  EXPECT_EQ(EventInt(ev, "images_total", 0), 12345678901234);
  EXPECT_EQ(EventNumber(ev, "missing", 4.5), 4.5);
  EXPECT_EQ(EventInt(Json::array({1, 2}), "port", 3), 3);
}

}  // namespace
}  // namespace adam
