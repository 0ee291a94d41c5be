// Link fitting: exact recovery of latency and bandwidth, outlier rejection,
// the slow tail carried apart, the single-size case, pairing SEND/RECV ends,
// and applying fits.
#include "pipeplan/core/link_calibration.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

ClusterSpec TwoHosts() {
  ClusterSpec c;
  c.devices = {{"a", "h0", 1e12, 1e9}, {"b", "h0", 1e12, 1e9}, {"c", "h1", 1e12, 1e9}};
  return c;
}

std::vector<TransferSample> Line(const std::string& src, const std::string& dst, double latency,
                                 double bandwidth, int n) {
  std::vector<TransferSample> out;
  for (int i = 0; i < n; ++i) {
    const double bytes = 1e5 * (1 + i % 5);
    out.push_back({src, dst, bytes, latency + bytes / bandwidth});
  }
  return out;
}

TEST(LinkCalibration, RecoversLatencyAndBandwidth) {
  const auto t = Line("a", "b", 50e-6, 2e9, 20);
  auto fit = FitLink(t, 5e-6);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->latency, 50e-6, 1e-9);
  EXPECT_NEAR(fit->bandwidth, 2e9, 1e3);
  EXPECT_EQ(fit->samples, 20);
}

TEST(LinkCalibration, RejectsOutliers) {
  auto t = Line("a", "b", 50e-6, 2e9, 40);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 2e-6);
  for (auto& s : t) s.seconds += noise(rng);
  // A descheduled receiver: three transfers 100x too slow.
  t[3].seconds *= 100;
  t[17].seconds *= 100;
  t[29].seconds *= 100;
  auto fit = FitLink(t, 5e-6);
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->bandwidth, 2e9, 0.05 * 2e9);
  EXPECT_NEAR(fit->latency, 50e-6, 5e-6);
  EXPECT_LE(fit->samples, 37);
  // The rejected transfers still count in the mean time: each is 99x its
  // line value too slow, over 40 transfers.
  double excess = 0;
  for (int i : {3, 17, 29}) excess += t[i].seconds - fit->Seconds(t[i].bytes) + fit->tail;
  EXPECT_NEAR(fit->tail, excess / 40, 2e-6);
  EXPECT_GT(fit->tail, 0);
}

// A transfer that is slow one time in five (a receiver waking late) is
// rejected from the line, and its time comes back as the tail: the fit's
// Seconds is the mean transfer time, its line the typical one.
TEST(LinkCalibration, TailIsTheMeanExcessOverTheLine) {
  std::vector<TransferSample> t;
  double all = 0;
  for (int i = 0; i < 50; ++i) {
    const double jitter = (i % 3) * 10e-6;
    const double seconds = (i % 5 == 4 ? 20e-3 : 6e-3) + jitter;
    t.push_back({"a", "b", 8e6, seconds});
    all += seconds / 50;
  }
  auto fit = FitLink(t, 5e-6);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->samples, 40);
  const double line = fit->latency + 8e6 / fit->bandwidth;
  EXPECT_NEAR(line, 6e-3, 20e-6);  // one size: the typical (median) time
  EXPECT_NEAR(fit->tail, all - line, 1e-9);
  EXPECT_GT(fit->tail, 2.5e-3);
  EXPECT_NEAR(fit->Seconds(8e6), all, 1e-9);
  // Applied, the tail is latency: the cluster predicts the mean.
  LinkCalibration links;
  links.links.push_back(*fit);
  links.links.back().src_device = "a";
  links.links.back().dst_device = "b";
  auto spec = ApplyLinkCalibration(TwoHosts(), links);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto cluster = Cluster::Build(*spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_NEAR(cluster->TransferSeconds(0, 1, 8e6), fit->Seconds(8e6), 1e-9);
  // Noise-free transfers have no tail.
  auto exact = FitLink(Line("a", "b", 50e-6, 2e9, 20), 5e-6);
  ASSERT_TRUE(exact.ok());
  EXPECT_NEAR(exact->tail, 0, 1e-12);
}

TEST(LinkCalibration, OneSizeKeepsModelledLatency) {
  std::vector<TransferSample> t(10, {"a", "b", 1e6, 1e-3});
  auto fit = FitLink(t, 10e-6);
  ASSERT_TRUE(fit.ok());
  EXPECT_DOUBLE_EQ(fit->latency, 10e-6);
  EXPECT_NEAR(fit->Seconds(1e6), 1e-3, 1e-12);
}

TEST(LinkCalibration, NothingUsableIsAnError) {
  std::vector<TransferSample> t = {{"a", "b", 0, 1}, {"a", "b", 1e6, -1}};
  EXPECT_EQ(FitLink(t, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LinkCalibration, PairsThenClassesAndApply) {
  auto t = Line("a", "b", 20e-6, 3e9, 10);       // own pair fit
  auto few = Line("b", "a", 20e-6, 3e9, 3);      // too few: class only
  auto cross = Line("a", "c", 100e-6, 1e9, 10);  // cross host
  t.insert(t.end(), few.begin(), few.end());
  t.insert(t.end(), cross.begin(), cross.end());
  const LinkCalibration links = FitLinks(t, TwoHosts(), {.min_samples = 8});
  const FittedLink* ab = links.Find("a", "b", true);
  ASSERT_NE(ab, nullptr);
  EXPECT_EQ(ab->scope, LinkScope::kPair);
  const FittedLink* ba = links.Find("b", "a", true);
  ASSERT_NE(ba, nullptr);
  EXPECT_EQ(ba->scope, LinkScope::kSameHost);
  const FittedLink* ca = links.Find("c", "a", false);
  ASSERT_NE(ca, nullptr);
  EXPECT_EQ(ca->scope, LinkScope::kCrossHost);

  auto spec = ApplyLinkCalibration(TwoHosts(), links);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto cluster = Cluster::Build(*spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_NEAR(cluster->TransferSeconds(0, 1, 4e5), 20e-6 + 4e5 / 3e9, 1e-9);
  EXPECT_NEAR(cluster->TransferSeconds(0, 2, 4e5), 100e-6 + 4e5 / 1e9, 1e-9);
}

TEST(LinkCalibration, PairsBlockedReceivesWithTheirSends) {
  // Rank 0 (device a) sends stage 0's output of microbatch 1 at t=1000 us;
  // rank 1 (device b) posted its RECV at t=900 us and blocked until 1600 us.
  StepSample s0{.worker_id = "w0", .device_id = "a", .step = 4, .timings = {}, .rank = 0};
  s0.timings.push_back({.action = "0SEND_F1",
                        .bytes = 1e6,
                        .post_unix_us = 1000,
                        .complete_unix_us = 5000,
                        .wait_seconds = 0});
  StepSample s1{.worker_id = "w1", .device_id = "b", .step = 4, .timings = {}, .rank = 1};
  s1.timings.push_back({.action = "1RECV_F1",
                        .bytes = 1e6,
                        .post_unix_us = 900,
                        .complete_unix_us = 1600,
                        .wait_seconds = 500e-6});
  // A RECV that did not block tells nothing about the link.
  s1.timings.push_back({.action = "1RECV_F2",
                        .bytes = 1e6,
                        .post_unix_us = 900,
                        .complete_unix_us = 9000,
                        .wait_seconds = 0});
  s0.timings.push_back({.action = "0SEND_F2",
                        .bytes = 1e6,
                        .post_unix_us = 1000,
                        .complete_unix_us = 5000,
                        .wait_seconds = 0});
  const std::vector<StepSample> step = {s0, s1};
  const std::vector<TransferSample> t = PairTransfers(step);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].src_device, "a");
  EXPECT_EQ(t[0].dst_device, "b");
  EXPECT_DOUBLE_EQ(t[0].bytes, 1e6);
  EXPECT_NEAR(t[0].seconds, 600e-6, 1e-12);
}

}  // namespace
}  // namespace pipeplan
