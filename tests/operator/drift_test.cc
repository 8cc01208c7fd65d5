// Drift: what the operator applies to an object that exists, and when the object as the API
// server returns it differs from that.
#include "reconcile/drift.h"

#include <gtest/gtest.h>

#include "reconcile/render.h"

namespace adam::op {
namespace {

using Json = kube::Json;

Json Container(const std::string& image) {
  return {{"name", "adam"}, {"image", image}, {"resources", {{"limits", {{"cpu", "2"}}}}}};
}

TEST(Drift, TheServersDefaultsAreNoDriftButAChangedOrMissingFieldIs) {
  const Json want = {
      {"metadata", {{"name", "j"}, {"labels", {{"a", "1"}}}, {"annotations", Json::object()}}},
      {"spec",
       {{"ports", {{{"name", "grpc"}, {"port", 7000}}}},
        {"hostNetwork", false},
        {"template", {{"spec", {{"containers", {Container("adam:1")}}}}}}}}};
  // What the API server returns: defaults added inside objects and list items, zero values and
  // empty maps left out, a quantity written in another form.
  Json live = want;
  live["metadata"].erase("annotations");
  live["metadata"]["uid"] = "u";
  live["metadata"]["labels"]["added-by-someone"] = "x";
  live["spec"].erase("hostNetwork");
  live["spec"]["ports"][0]["protocol"] = "TCP";
  live["spec"]["clusterIP"] = "10.0.0.1";
  live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "2000m";
  live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent";
  EXPECT_EQ(FirstDifference(want, live), "");

  Json changed = live;
  changed["spec"]["ports"][0]["port"] = 1;
  EXPECT_EQ(FirstDifference(want, changed), "spec.ports[name=grpc].port");
  changed = live;
  changed["spec"]["template"]["spec"]["containers"][0]["image"] = "evil:1";
  EXPECT_EQ(FirstDifference(want, changed), "spec.template.spec.containers[name=adam].image");
  changed = live;
  changed["metadata"]["labels"].erase("a");
  EXPECT_EQ(FirstDifference(want, changed), "metadata.labels.a");
  changed = live;
  changed["spec"]["hostNetwork"] = true;
  EXPECT_EQ(FirstDifference(want, changed), "spec.hostNetwork");
  changed = live;
  changed["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "1";
  EXPECT_EQ(FirstDifference(want, changed),
            "spec.template.spec.containers[name=adam].resources.limits.cpu");
  // A list is the operator's whole: an item added or taken away is drift.
  changed = live;
  changed["spec"]["ports"].push_back({{"name", "extra"}, {"port", 1}});
  EXPECT_EQ(FirstDifference(want, changed), "spec.ports");
  changed = live;
  changed["spec"]["ports"] = Json::array();
  EXPECT_EQ(FirstDifference(want, changed), "spec.ports");
  changed = live;
  changed["spec"].erase("template");
  EXPECT_EQ(FirstDifference(want, changed), "spec.template");
  // A list's items come without apiVersion and kind: those are no drift.
  Json listed = live;
  listed.erase("apiVersion");
  Json typed = want;
  typed["apiVersion"] = "v1";
  typed["kind"] = "Service";
  EXPECT_EQ(FirstDifference(typed, listed), "");
  // An unnamed list item is named by its place.
  EXPECT_EQ(FirstDifference(Json{{"args", {"a", "b"}}}, Json{{"args", {"a", "c"}}}), "args[1]");
}

// Written whole where an apply is refused: the operator's maps merged into the object, its lists
// replacing the object's (an item another client re-keyed goes), the rest kept.
TEST(Drift, WrittenOverKeepsOthersFieldsAndReplacesTheOperatorsLists) {
  const Json live = {
      {"metadata", {{"resourceVersion", "7"}, {"labels", {{"a", "x"}, {"b", "2"}}}}},
      {"spec",
       {{"clusterIP", "None"},
        {"ports", {{{"name", "grpc"}, {"port", 1}}, {{"name", "grpc"}, {"port", 7000}}}}}}};
  const Json want = {{"apiVersion", "v1"},
                     {"kind", "Service"},
                     {"metadata", {{"labels", {{"a", "1"}}}}},
                     {"spec", {{"ports", {{{"name", "grpc"}, {"port", 7000}}}}}}};
  const Json out = WrittenOver(live, want);
  EXPECT_EQ(out["apiVersion"], "v1");
  EXPECT_EQ(out["metadata"]["resourceVersion"], "7");  // the PUT is at the version read
  EXPECT_EQ(out["metadata"]["labels"], (Json{{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(out["spec"]["clusterIP"], "None");
  EXPECT_EQ(out["spec"]["ports"], want["spec"]["ports"]);
  EXPECT_EQ(FirstDifference(want, out), "");
}

TEST(Drift, QuantitiesCompareByValue) {
  long double v = 0;
  ASSERT_TRUE(QuantityValue("500m", &v));
  EXPECT_DOUBLE_EQ(static_cast<double>(v), 0.5);
  ASSERT_TRUE(QuantityValue("2Gi", &v));
  EXPECT_DOUBLE_EQ(static_cast<double>(v), 2147483648.0);
  ASSERT_TRUE(QuantityValue("1.5k", &v));
  EXPECT_DOUBLE_EQ(static_cast<double>(v), 1500.0);
  ASSERT_TRUE(QuantityValue("12e3", &v));
  EXPECT_DOUBLE_EQ(static_cast<double>(v), 12000.0);
  ASSERT_TRUE(QuantityValue("-1", &v));
  EXPECT_DOUBLE_EQ(static_cast<double>(v), -1.0);
  for (const char* none : {"", "m", "Gi", "1Gb", "adam:0.1.0", "1.2.3", "e3", "1e", "1e12345"})
    EXPECT_FALSE(QuantityValue(none, &v)) << none;
  EXPECT_EQ(FirstDifference(Json{{"storage", "1Gi"}}, Json{{"storage", "1024Mi"}}), "");
  EXPECT_EQ(FirstDifference(Json{{"storage", "1Gi"}}, Json{{"storage", "1G"}}), "storage");
  EXPECT_EQ(FirstDifference(Json{{"tag", "1"}}, Json{{"tag", "one"}}), "tag");
  EXPECT_EQ(FirstDifference(Json{{"cpu", 2}}, Json{{"cpu", "2"}}), "");
  EXPECT_EQ(FirstDifference(Json{{"cpu", 0.5}}, Json{{"cpu", "500m"}}), "");
  EXPECT_EQ(FirstDifference(Json{{"cpu", 2}}, Json{{"cpu", "3"}}), "cpu");
  EXPECT_EQ(FirstDifference(Json{{"on", true}}, Json{{"on", "1"}}), "on");
}

TEST(Drift, APodOrClaimIsAppliedItsLabelsAndAnnotationsAndAStatefulSetWhatMayChange) {
  const Json pod = {{"apiVersion", "v1"},
                    {"kind", "Pod"},
                    {"metadata",
                     {{"name", "j-trainer-0"},
                      {"namespace", "ml"},
                      {"labels", {{kRoleLabel, "trainer"}}},
                      {"annotations", {{kStageAnnotation, "2"}, {kGenerationAnnotation, "3"}}},
                      {"ownerReferences", Json::array({{{"uid", "u"}}})}}},
                    {"spec", {{"containers", {Container("adam:1")}}}}};
  const Json part = ApplyConfiguration(pod);
  EXPECT_EQ(part, (Json{{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata",
                         {{"name", "j-trainer-0"},
                          {"namespace", "ml"},
                          {"labels", {{kRoleLabel, "trainer"}}},
                          {"annotations", {{kStageAnnotation, "2"}}}}}}))
      << part.dump(2);
  Json claim = pod;
  claim["kind"] = "PersistentVolumeClaim";
  claim["spec"] = {{"resources", {{"requests", {{"storage", "1Gi"}}}}}};
  EXPECT_FALSE(ApplyConfiguration(claim).contains("spec"));

  const Json set = {{"apiVersion", "apps/v1"},
                    {"kind", "StatefulSet"},
                    {"metadata", {{"name", "j-controller"}}},
                    {"spec",
                     {{"serviceName", "j"},
                      {"replicas", 3},
                      {"selector", {{"matchLabels", {{kRoleLabel, "controller"}}}}},
                      {"updateStrategy", {{"type", "OnDelete"}}},
                      {"template", {{"spec", {{"containers", {Container("adam:1")}}}}}},
                      {"volumeClaimTemplates", Json::array({{{"metadata", {{"name", "s"}}}}})}}},
                    {"status", {{"replicas", 3}}}};
  const Json s = ApplyConfiguration(set);
  EXPECT_FALSE(s.contains("status"));
  EXPECT_EQ(s["metadata"], set["metadata"]);
  for (const char* immutable : {"serviceName", "selector", "volumeClaimTemplates"})
    EXPECT_FALSE(s["spec"].contains(immutable)) << immutable;
  for (const char* mutable_field : {"replicas", "updateStrategy", "template"})
    EXPECT_EQ(s["spec"][mutable_field], set["spec"][mutable_field]) << mutable_field;

  const Json service = {{"apiVersion", "v1"},
                        {"kind", "Service"},
                        {"metadata", {{"name", "j"}}},
                        {"spec", {{"clusterIP", "None"}}}};
  EXPECT_EQ(ApplyConfiguration(service), service);
}

}  // namespace
}  // namespace adam::op
