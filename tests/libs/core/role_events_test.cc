// The typed role events: every kind goes to the wire and back unchanged, a line an older writer
// wrote still reads, a reader is lenient with what it does not expect, and the reference page
// names every kind and field.
#include "core/role_events.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/event.h"

namespace adam::events {
namespace {

// Gives every field of `e` a value of its own (so two fields written under one key, or a field
// not read back, shows as a difference).
template <class E>
E Filled(int seed) {
  E e;
  int n = seed;
  E::Fields(e, [&n](const char* /*key*/, auto& field) {
    using F = std::decay_t<decltype(field)>;
    ++n;
    if constexpr (std::is_same_v<F, std::string>) {
      field = "text " + std::to_string(n);
    } else if constexpr (std::is_same_v<F, bool>) {
      field = n % 2 == 0;
    } else if constexpr (std::is_same_v<F, std::optional<double>>) {
      field = n + 0.25;
    } else if constexpr (std::is_same_v<F, std::vector<uint32_t>>) {
      field = {uint32_t(n), uint32_t(n + 7)};
    } else if constexpr (std::is_same_v<F, std::vector<ClassCount>>) {
      field = {Filled<ClassCount>(n), Filled<ClassCount>(n + 10)};
    } else if constexpr (std::is_floating_point_v<F>) {
      field = n + 0.5;
    } else {
      field = F(n);
    }
  });
  return e;
}

template <size_t... I>
std::vector<RoleEvent> EveryKindFilled(std::index_sequence<I...>) {
  return {RoleEvent(Filled<std::variant_alternative_t<I, RoleEvent>>(int(I) * 100))...};
}

std::vector<RoleEvent> EveryKindFilled() {
  return EveryKindFilled(std::make_index_sequence<std::variant_size_v<RoleEvent>>());
}

TEST(RoleEvents, EveryKindComesBackAsItWent) {
  const auto all = EveryKindFilled();
  ASSERT_EQ(all.size(), Kinds().size());
  std::set<std::string_view> seen;
  for (const RoleEvent& ev : all) {
    const nlohmann::json j = ToJson(ev);
    EXPECT_EQ(j.value("event", ""), KindOf(ev));
    EXPECT_TRUE(seen.insert(KindOf(ev)).second) << "two kinds named " << KindOf(ev);
    const auto back = FromJson(nlohmann::json::parse(j.dump()));
    ASSERT_TRUE(back.has_value()) << j.dump();
    EXPECT_TRUE(*back == ev) << j.dump() << "\nread back as " << ToJson(*back).dump();
  }
}

TEST(RoleEvents, ReadyCarriesItsNamedListenersAsKeys) {
  const Ready ready{.port = 40123, .metrics_port = 40124, .ports = {{"replication_port", 40125}}};
  const nlohmann::json j = ToJson(ready);
  EXPECT_EQ(j.value("replication_port", 0), 40125);
  const auto back = FromJson(j);
  ASSERT_TRUE(back && std::holds_alternative<Ready>(*back));
  EXPECT_EQ(std::get<Ready>(*back), ready);
}

// The wire as roles of the last release wrote it, and as the Go tests and pod logs read it.
TEST(RoleEvents, ALineAsRolesWroteItReads) {
  const auto ev =
      ParseLine(R"(@adam {"event":"epoch","trainer":1,"epoch":3,"learning_rate":0.01,"images":500,)"
                R"("images_total":1500,"loss":"NaN","seconds":2.5,"epoch_closed_early":true,)"
                R"("test_accuracy":0.875})");
  ASSERT_TRUE(ev && std::holds_alternative<Epoch>(*ev));
  const Epoch& e = std::get<Epoch>(*ev);
  EXPECT_EQ(e.trainer, 1);
  EXPECT_EQ(e.epoch, 3);
  EXPECT_EQ(e.images_total, 1500);
  EXPECT_TRUE(std::isnan(e.loss));
  EXPECT_TRUE(e.epoch_closed_early);
  EXPECT_EQ(e.test_accuracy, 0.875);

  const auto failover =
      ParseLine(R"(@adam {"event":"failover","dead":[2,5],"map_version":9,"shards":3})");
  ASSERT_TRUE(failover && std::holds_alternative<Failover>(*failover));
  EXPECT_EQ(std::get<Failover>(*failover).dead, (std::vector<uint32_t>{2, 5}));
  EXPECT_EQ(std::get<Failover>(*failover).shards, 3);
}

// What a reader does not expect keeps the field's default; it never throws.
TEST(RoleEvents, AReaderIsLenient) {
  EXPECT_FALSE(FromJson({{"event", "no_such_kind"}, {"trainer", 1}}));
  EXPECT_FALSE(FromJson({{"trainer", 1}}));
  EXPECT_FALSE(FromJson({{"event", 3}}));
  EXPECT_FALSE(FromJson(nlohmann::json::array({1, 2})));
  EXPECT_FALSE(ParseLine("a log line"));
  EXPECT_FALSE(ParseLine("@adam {not json"));

  const auto done = FromJson({{"event", "done"},
                              {"trainer", "zero"},  // a string for a number
                              {"epochs", 4.0},      // a whole float
                              {"images_total", -1},
                              {"test_accuracy", "Infinity"},
                              {"push_bytes", nlohmann::json::array()},
                              {"a_field_of_a_later_release", 1},  // ignored
                              {"classes",
                               {{{"name", "coat"}, {"images", 10}, {"correct", "nine"}},
                                "not a row",
                                {{"name", 7}, {"images", 3}}}}});
  ASSERT_TRUE(done && std::holds_alternative<Done>(*done));
  const Done& d = std::get<Done>(*done);
  EXPECT_EQ(d.trainer, 0);
  EXPECT_EQ(d.epochs, 4);
  EXPECT_EQ(d.images_total, -1);
  EXPECT_EQ(d.test_accuracy, std::numeric_limits<double>::infinity());
  EXPECT_EQ(d.push_bytes, 0u);
  ASSERT_EQ(d.classes.size(), 2u);  // the row that is not an object dropped
  EXPECT_EQ(d.classes[0], (ClassCount{"coat", 10, 0}));
  EXPECT_EQ(d.classes[1], (ClassCount{"", 3, 0}));

  // A negative number keeps an unsigned field's default; a list element of another type is
  // dropped; an absent optional stays absent.
  const auto fell = FromJson({{"event", "shard_fell_back"}, {"shard", -4}, {"version", 12}});
  ASSERT_TRUE(fell);
  EXPECT_EQ(std::get<ShardFellBack>(*fell).shard, 0u);
  EXPECT_EQ(std::get<ShardFellBack>(*fell).version, 12u);
  const auto failover = FromJson({{"event", "failover"}, {"dead", {1, "two", -3, 4}}});
  ASSERT_TRUE(failover);
  EXPECT_EQ(std::get<Failover>(*failover).dead, (std::vector<uint32_t>{1, 4}));
  const auto epoch = FromJson({{"event", "epoch"}, {"test_accuracy", "high"}});
  ASSERT_TRUE(epoch);
  EXPECT_FALSE(std::get<Epoch>(*epoch).test_accuracy.has_value());

  // Past int64's range: an unsigned field takes the number whole, a signed one keeps its default
  // (it is not wrapped round to a negative).
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  const auto big = FromJson({{"event", "done"}, {"push_bytes", huge}, {"images_total", huge}});
  ASSERT_TRUE(big);
  EXPECT_EQ(std::get<Done>(*big).push_bytes, huge);
  EXPECT_EQ(std::get<Done>(*big).images_total, 0);
}

// Emit writes one line a reader takes back, with non-finite numbers as strings.
TEST(RoleEvents, EmitWritesALineThatParses) {
  ::testing::internal::CaptureStdout();
  Epoch epoch;
  epoch.trainer = 2;
  epoch.loss = std::numeric_limits<double>::quiet_NaN();
  Emit(epoch);
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1);
  EXPECT_NE(out.find(R"("loss":"NaN")"), std::string::npos) << out;
  const auto ev = ParseLine(out.substr(0, out.size() - 1));
  ASSERT_TRUE(ev && std::holds_alternative<Epoch>(*ev));
  EXPECT_EQ(std::get<Epoch>(*ev).trainer, 2);
  EXPECT_TRUE(std::isnan(std::get<Epoch>(*ev).loss));
  EXPECT_FALSE(std::get<Epoch>(*ev).test_accuracy.has_value());
}

// docs/reference/summary-and-events.md's table of role events has a row for every kind, and the
// row names every field the kind writes.
TEST(RoleEvents, TheReferencePageNamesEveryKindAndField) {
  std::ifstream in(std::string(ADAM_SOURCE_DIR) + "/docs/reference/summary-and-events.md");
  ASSERT_TRUE(in) << "cannot read the reference page";
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("| `", 0) == 0) rows.push_back(line);
  for (const RoleEvent& ev : EveryKindFilled()) {
    const std::string kind = "`" + std::string(KindOf(ev)) + "`";
    std::string row;
    for (const auto& r : rows)
      if (r.substr(0, r.find(" | ")).find(kind) != std::string::npos) row = r;
    ASSERT_FALSE(row.empty()) << "no row for " << kind;
    const nlohmann::json j = ToJson(ev);
    for (const auto& [key, _] : j.items()) {
      if (key == "event") continue;
      EXPECT_NE(row.find("`" + key + "`"), std::string::npos)
          << "the row of " << kind << " does not name `" << key << "`";
    }
  }
}

}  // namespace
}  // namespace adam::events
