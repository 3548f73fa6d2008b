// Checks of the distributed-training tests against the single-process engine.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/engine.h"
#include "engine/ps/shard_store.h"

namespace dlrm::testing {

// Every row of every table of the engine is held by some shard of `owners`, and every
// shard's rows equal the engine's, bitwise.
inline void ExpectStoresMatchEngine(const Engine& engine, const config::DlrmConfig& c,
                                    const std::vector<const ps::EmbeddingShardStore*>& owners,
                                    const std::string& where) {
  for (int t = 0; t < c.model().tables_size(); ++t) {
    const auto& tc = c.model().tables(t);
    std::vector<float> want(tc.num_rows() * tc.dim());
    engine.ReadParameter("embedding." + tc.name() + ".weight", want.data(),
                         static_cast<int64_t>(want.size()));
    int64_t covered = 0;
    for (const ps::EmbeddingShardStore* o : owners) {
      for (size_t i = 0; i < o->shards().size(); ++i) {
        const auto& s = o->shards()[i];
        if (s.table != t) continue;
        const EmbeddingTable<float>& piece = o->shard_table(static_cast<int32_t>(i));
        std::vector<float> got(static_cast<size_t>(piece.dim()));
        for (int64_t r = s.row_begin; r < s.row_end; ++r) {
          const float* expected = want.data() + r * tc.dim() + s.col_begin;
          piece.ReadRow(r - s.row_begin, got.data());  // widened where 16-bit
          ASSERT_EQ(std::memcmp(got.data(), expected, piece.dim() * sizeof(float)), 0)
              << where << ": table " << tc.name() << " row " << r;
          covered += piece.dim();
        }
      }
    }
    EXPECT_GE(covered, tc.num_rows() * tc.dim()) << where << ": table " << tc.name();
  }
}

// Every dense parameter of `model` equals the engine's, bitwise.
template <typename Model>
void ExpectDenseMatchesEngine(const Engine& engine, const Model& model, const std::string& where) {
  for (const DenseParamInfo& p : model.dense_param_infos()) {
    std::vector<float> want(p.size);
    engine.ReadParameter(p.name, want.data(), static_cast<int64_t>(want.size()));
    ASSERT_EQ(
        std::memcmp(want.data(), model.dense_params().data() + p.offset, p.size * sizeof(float)), 0)
        << where << ": " << p.name;
  }
}

}  // namespace dlrm::testing
