// TestSet: the test images fetched from the data server in batches, and an evaluation's
// per-class counts and kept weights.
#include "trainer/test_set.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace adam::trainer {
namespace {

// Serves `labels` as 2x2 test images (pixel = label) in batches of at most `per_batch`;
// `bad_batch` >= 0 sends that batch with one pixel byte short.
class TestImages final : public DataClient {
 public:
  TestImages(std::vector<uint8_t> labels, uint32_t per_batch, int bad_batch = -1)
      : labels_(std::move(labels)), per_batch_(per_batch), bad_batch_(bad_batch) {}
  Status GetInfo(adam::v1::DatasetInfo*) override { return InternalError("not used"); }
  Status GetBatch(const adam::v1::GetBatchRequest&, adam::v1::Batch*) override {
    return InternalError("not used");
  }
  Status GetTestBatch(const adam::v1::GetTestBatchRequest& req, adam::v1::Batch* out) override {
    const uint32_t n =
        std::min({per_batch_, req.max_count(), uint32_t(labels_.size()) - req.offset()});
    for (uint32_t i = req.offset(); i < req.offset() + n; ++i) {
      out->mutable_labels()->push_back(char(labels_[i]));
      out->mutable_pixels()->append(4, char(labels_[i]));
    }
    if (calls_++ == bad_batch_) out->mutable_pixels()->pop_back();
    out->set_count(n);
    out->set_end_of_share(req.offset() + n == labels_.size());
    return OkStatus();
  }
  Status FinishEpoch(const adam::v1::FinishEpochRequest&, adam::v1::FinishEpochResponse*) override {
    return InternalError("not used");
  }
  Status AskEpoch(const adam::v1::FinishEpochRequest&, adam::v1::FinishEpochResponse*,
                  std::chrono::milliseconds) override {
    return InternalError("not used");
  }
  Status StopJob() override { return InternalError("not used"); }
  int calls() const { return calls_; }

 private:
  const std::vector<uint8_t> labels_;
  const uint32_t per_batch_;
  const int bad_batch_;
  int calls_ = 0;
};

TEST(TestSet, FetchesEveryBatchInOrder) {
  TestImages data({0, 1, 2, 1, 0, 2, 2}, 3);
  TestSet test;
  ASSERT_TRUE(test.Fetch(data, 4).ok());
  EXPECT_EQ(data.calls(), 3);  // 3 + 3 + 1 images
  ASSERT_EQ(test.count(), 7);
  const std::vector<uint8_t> labels(test.labels(), test.labels() + 7);
  EXPECT_EQ(labels, (std::vector<uint8_t>{0, 1, 2, 1, 0, 2, 2}));
  EXPECT_EQ(test.pixels()[4 * 2], 2);  // the third image's first pixel
  EXPECT_EQ(test.pixels()[4 * 6 + 3], 2);
}

TEST(TestSet, ABatchWhoseSizesDoNotMatchItsCountIsRefusedNamingThem) {
  TestImages data({0, 1, 2, 1, 0}, 2, /*bad_batch=*/1);
  TestSet test;
  const Status st = test.Fetch(data, 4);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("2 images, 7 pixel bytes, 2 labels"), std::string::npos)
      << st.message();
}

TEST(TestSet, RecordCountsEachClassAndKeepsOnlyWeightsGiven) {
  TestImages data({0, 1, 2, 1, 0, 7}, 16);  // label 7: past the 3 classes, not counted
  TestSet test;
  ASSERT_TRUE(test.Fetch(data, 4).ok());
  test.SetClassNames({"zero", "one"});  // fewer names than classes: the rest are numbered
  test.Record({0, 2, 2, 1, -1, 7}, 3, 0.5, {1.f, 2.f});
  const auto per = test.PerClass();
  ASSERT_EQ(per.size(), 3u);
  EXPECT_EQ(per[0].name, "zero");
  EXPECT_EQ(per[0].images, 2);
  EXPECT_EQ(per[0].correct, 1);
  EXPECT_EQ(per[1].name, "one");
  EXPECT_EQ(per[1].images, 2);
  EXPECT_EQ(per[1].correct, 1);
  EXPECT_EQ(per[2].name, "2");
  EXPECT_EQ(per[2].images, 1);
  EXPECT_EQ(per[2].correct, 1);
  EXPECT_EQ(test.weights(), (std::vector<float>{1.f, 2.f}));
  EXPECT_DOUBLE_EQ(test.weights_accuracy(), 0.5);
  // An evaluation without weights counts again but keeps the last weights and their accuracy.
  test.Record({1, 1, 1, 1, 1, 1}, 3, 0.25, {});
  EXPECT_EQ(test.PerClass()[1].correct, 2);
  EXPECT_EQ(test.PerClass()[0].correct, 0);
  EXPECT_EQ(test.weights(), (std::vector<float>{1.f, 2.f}));
  EXPECT_DOUBLE_EQ(test.weights_accuracy(), 0.5);
}

}  // namespace
}  // namespace adam::trainer
