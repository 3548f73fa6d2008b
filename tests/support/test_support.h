// Shared helpers for the test suites.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/data/batch.h"
#include "engine/engine.h"

namespace dlrm::testing {

// A fresh, empty directory for one test's files (under DLRM_TEST_TMPDIR or /tmp).
std::string TempDir(const std::string& name);

// The bytes of the file at `path` ("" if it cannot be read).
std::string FileContents(const std::string& path);

// A small model: 4 dense features, 3 sparse features over 2 tables (features 0 and 2 share
// table "t0" of 40 rows; feature 1 uses "t1" of 25 rows, MEAN pooling), dim 4, DOT
// interaction; `optimizers` is appended verbatim (e.g. "dense_optimizer { adam {} }").
std::string SmallConfigText(const std::string& optimizers = "", int num_threads = 1,
                            int chunk_rows = 8, uint64_t seed = 5);

// A deterministic batch for SmallConfigText's model: bags of 0-3 ids (empty bags
// included), some repeated ids, per-id weights when weighted, labels in {0, 1}.
OwnedBatch SmallBatch(int64_t batch_size, uint64_t salt, bool weighted = false);
// A SmallBatch of 4 samples whose bags hold 12 distinct rows of each table, in order:
// t0's [t0_first, t0_first + 12) (both of its features), t1's [t1_first, t1_first + 12);
// dense values 0 with `zero_dense`.
OwnedBatch SmallBatchOfRows(int64_t t0_first, int64_t t1_first, uint64_t salt,
                            bool zero_dense = false);

// Every parameter of the engine (Engine::Parameters), by name: its observable model state.
std::map<std::string, std::vector<float>> ParameterValues(const Engine& engine);
// Equal names and bit-identical values (NaN payloads and signed zeros included).
bool BitwiseEqual(const std::map<std::string, std::vector<float>>& a,
                  const std::map<std::string, std::vector<float>>& b);

// call() must throw a dlrm::Error with `code` whose message contains `needle`.
template <typename Call>
void ExpectError(Call call, StatusCode code, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "not refused: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr(needle));
  }
}

}  // namespace dlrm::testing
