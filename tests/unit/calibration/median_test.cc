// One median for every calibration: odd and even counts, unsorted input,
// and the caller's value for no samples.
#include "pipeplan/core/median.h"

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

TEST(Median, OddCountIsTheMiddleValue) {
  EXPECT_DOUBLE_EQ(MedianOr({5, 1, 3}, 0), 3);
  EXPECT_DOUBLE_EQ(MedianOr({7}, 0), 7);
}

TEST(Median, EvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_DOUBLE_EQ(MedianOr({4, 1, 3, 2}, 0), 2.5);
  EXPECT_DOUBLE_EQ(MedianOr({2, 2, 9, 9}, 0), 5.5);
}

TEST(Median, AnOutlierDoesNotMoveIt) {
  EXPECT_DOUBLE_EQ(MedianOr({1.0, 1.1, 0.9, 1e300}, 0), 1.05);
}

TEST(Median, NoSamplesGiveTheCallersValue) {
  EXPECT_DOUBLE_EQ(MedianOr({}, 1), 1);
  EXPECT_DOUBLE_EQ(MedianOr({}, 0), 0);
}

}  // namespace
}  // namespace pipeplan
