// Config parsing and validation: every kind of invalid config is rejected with an error
// that names the field and the reason.
#include "engine/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/core/status.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

config::DlrmConfig Valid() { return ParseConfigText(testing::SmallConfigText()); }

// Expects ValidateConfig to fail with kInvalidArgument and a message containing each part.
void ExpectInvalid(const config::DlrmConfig& config, const std::string& field,
                   const std::string& reason) {
  try {
    ValidateConfig(config);
    ADD_FAILURE() << "accepted a config with a bad " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr(field));
    EXPECT_THAT(e.what(), HasSubstr(reason));
  }
}

TEST(ConfigTest, SmallConfigIsValidAndRoundTripsThroughText) {
  const config::DlrmConfig config = Valid();
  EXPECT_NO_THROW(ValidateConfig(config));
  EXPECT_EQ(config.model().tables_size(), 2);
  EXPECT_EQ(config.dense_optimizer().learning_rate(), 0.01f);  // schema default
  const config::DlrmConfig again = ParseConfigText(ConfigToText(config));
  EXPECT_EQ(again.SerializeAsString(), config.SerializeAsString());
}

TEST(ConfigTest, ShippedConfigsAreValid) {
  const config::DlrmConfig demo = LoadConfigFile(DLRM_SOURCE_DIR "/tools/configs/demo.pbtxt");
  EXPECT_NO_THROW(ValidateConfig(demo));
  EXPECT_EQ(demo.model().sparse_features_size(), 26);
  EXPECT_EQ(demo.model().num_dense_features(), 13);
}

TEST(ConfigTest, SyntaxErrorsNameLineAndField) {
  try {
    ParseConfigText("model {\n  num_dense_features: 3\n  no_such_field: 1\n}\n");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("line 3"));
    EXPECT_THAT(e.what(), HasSubstr("no_such_field"));
  }
  EXPECT_THROW(ParseConfigText("model { num_dense_features: \"x\" }"), Error);
  EXPECT_THROW(ParseConfigText("model {"), Error);
}

TEST(ConfigTest, UnreadableFileIsAnIoError) {
  try {
    LoadConfigFile("/nonexistent/config.pbtxt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/config.pbtxt"));
  }
}

// Adversarial finding 11: a directory opened as a file read as an empty config ("model
// must be set", without the path).
TEST(ConfigTest, ADirectoryIsNoConfigFile) {
  const std::string dir = testing::TempDir("config_dir");
  try {
    LoadConfigFile(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr("cannot read config file \"" + dir + "\": it is a directory"));
  }
}

TEST(ConfigTest, LoadsFromFile) {
  const std::string path = testing::TempDir("config_test") + "/c.pbtxt";
  std::ofstream(path) << testing::SmallConfigText();
  EXPECT_EQ(LoadConfigFile(path).model().num_dense_features(), 4);
  std::ofstream(path) << "seed: -1";
  try {
    LoadConfigFile(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

TEST(ConfigTest, RejectsModelErrors) {
  auto c = Valid();
  c.clear_model();
  ExpectInvalid(c, "model", "must be set");

  c = Valid();
  c.mutable_model()->set_num_dense_features(0);
  ExpectInvalid(c, "model.num_dense_features", "> 0");

  c = Valid();
  c.mutable_model()->clear_tables();
  ExpectInvalid(c, "model.tables", "at least one");

  c = Valid();
  c.mutable_model()->mutable_tables(1)->set_name("");
  ExpectInvalid(c, "model.tables[1].name", "empty");

  c = Valid();
  c.mutable_model()->mutable_tables(1)->set_name("t0");
  ExpectInvalid(c, "model.tables[1].name", "used by another table");

  c = Valid();
  c.mutable_model()->mutable_tables(0)->set_num_rows(0);
  ExpectInvalid(c, "model.tables[0].num_rows", "> 0");

  c = Valid();
  c.mutable_model()->mutable_tables(1)->set_dim(-4);
  ExpectInvalid(c, "model.tables[1].dim", "got -4");

  c = Valid();
  c.mutable_model()->mutable_tables(0)->set_num_rows(int64_t{1} << 60);
  ExpectInvalid(c, "model.tables[0]", "overflows");

  c = Valid();
  auto* init = c.mutable_model()->mutable_tables(0)->mutable_initializer();
  init->set_kind(config::Initializer::UNIFORM);
  init->set_low(1);
  init->set_high(0);
  ExpectInvalid(c, "model.tables[0].initializer.low", "high");

  c = Valid();
  c.mutable_model()->mutable_tables(1)->mutable_initializer()->set_stddev(-1);
  ExpectInvalid(c, "model.tables[1].initializer.stddev", ">= 0");
}

TEST(ConfigTest, RejectsFeatureErrors) {
  auto c = Valid();
  c.mutable_model()->clear_sparse_features();
  ExpectInvalid(c, "model.sparse_features", "at least one");

  c = Valid();
  c.mutable_model()->mutable_sparse_features(2)->set_table("nope");
  ExpectInvalid(c, "model.sparse_features[2].table", "\"nope\" names no table");

  c = Valid();
  c.mutable_model()->mutable_sparse_features(1)->set_name("f0");
  ExpectInvalid(c, "model.sparse_features[1].name", "used by another feature");

  c = Valid();
  c.mutable_model()->mutable_sparse_features(0)->set_name("");
  ExpectInvalid(c, "model.sparse_features[0].name", "empty");
}

TEST(ConfigTest, RejectsMlpAndInteractionErrors) {
  auto c = Valid();
  c.mutable_model()->mutable_bottom_mlp()->clear_layer_sizes();
  ExpectInvalid(c, "model.bottom_mlp.layer_sizes", "at least one layer");

  c = Valid();
  c.mutable_model()->mutable_top_mlp()->set_layer_sizes(0, 0);
  ExpectInvalid(c, "model.top_mlp.layer_sizes[0]", "got 0");

  c = Valid();
  c.mutable_model()->mutable_top_mlp()->set_layer_sizes(2, 2);
  ExpectInvalid(c, "model.top_mlp.layer_sizes", "end in 1");

  c = Valid();  // DOT needs embedding dims == bottom output width
  c.mutable_model()->mutable_bottom_mlp()->set_layer_sizes(1, 6);
  ExpectInvalid(c, "model.interaction DOT", "model.sparse_features[0]");

  c.mutable_model()->set_interaction(config::ModelConfig::CAT);  // CAT allows any widths
  EXPECT_NO_THROW(ValidateConfig(c));
}

TEST(ConfigTest, RejectsTrainingErrors) {
  auto c = Valid();
  c.mutable_dense_optimizer()->set_learning_rate(-0.1f);
  ExpectInvalid(c, "dense_optimizer.learning_rate", ">= 0");

  c = Valid();
  c.mutable_sparse_optimizer()->set_learning_rate(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(c, "sparse_optimizer.learning_rate", "finite");

  c = Valid();
  c.mutable_lr_schedule()->set_warmup_steps(-5);
  ExpectInvalid(c, "lr_schedule.warmup_steps", "got -5");

  c = Valid();
  c.mutable_lr_schedule()->set_decay_steps(-1);
  ExpectInvalid(c, "lr_schedule.decay_steps", ">= 0");

  c = Valid();
  c.mutable_lr_schedule()->set_decay_power(0);
  ExpectInvalid(c, "lr_schedule.decay_power", "> 0");

  c = Valid();
  c.mutable_lr_schedule()->set_end_factor(1.5f);
  ExpectInvalid(c, "lr_schedule.end_factor", "[0, 1]");

  c = Valid();
  c.set_num_threads(-2);
  ExpectInvalid(c, "num_threads", "got -2");

  c = Valid();
  c.set_reduction_chunk_rows(0);
  ExpectInvalid(c, "reduction_chunk_rows", "> 0");
}

TEST(ConfigTest, RejectsDistributedErrors) {
  config::DlrmConfig c = Valid();
  c.mutable_distributed()->set_staleness(0);
  ExpectInvalid(c, "distributed.staleness", "[1, 1000]");
  c = Valid();
  c.mutable_distributed()->set_lookahead(65);
  ExpectInvalid(c, "distributed.lookahead", "[0, 64]");
}

TEST(ConfigTest, RejectsDeviceErrors) {
  config::DlrmConfig c = Valid();
  c.mutable_device()->set_kind(config::DeviceConfig::CUDA);
  c.mutable_device()->set_ordinal(-1);
  ExpectInvalid(c, "device.ordinal", "[0, 1023], got -1");
  c.mutable_device()->set_ordinal(1024);
  ExpectInvalid(c, "device.ordinal", "got 1024");
  c = Valid();
  c.mutable_device()->set_ordinal(2);
  ExpectInvalid(c, "device.ordinal", "device.kind is CPU");
  c = Valid();
  c.mutable_device()->set_kind(config::DeviceConfig::CUDA);
  c.mutable_device()->set_ordinal(3);
  c.mutable_device()->set_cuda_graph(false);
  c.mutable_device()->set_matmul_precision(config::DeviceConfig::HIGH);
  EXPECT_NO_THROW(ValidateConfig(c));  // whether a device 3 exists is the engine's question
  c.mutable_device()->set_matmul_precision(static_cast<config::DeviceConfig::MatmulPrecision>(7));
  ExpectInvalid(c, "device.matmul_precision 7", "HIGHEST, HIGH or MEDIUM");
  c = Valid();
  c.mutable_device()->set_cuda_graph(true);
  ExpectInvalid(c, "device.cuda_graph", "device.kind is CPU");
  c = Valid();
  c.mutable_device()->set_matmul_precision(config::DeviceConfig::HIGH);
  ExpectInvalid(c, "device.matmul_precision HIGH (TF32) is for CUDA", "bf16 (MEDIUM)");
  for (const auto cpu : {config::DeviceConfig::HIGHEST, config::DeviceConfig::MEDIUM}) {
    c.mutable_device()->set_matmul_precision(cpu);  // MEDIUM: whether the CPU can, the model's
    EXPECT_NO_THROW(ValidateConfig(c));
  }
  EXPECT_THROW(ParseConfigText("device { kind: TPU }"), Error);
}

// Memory and placement are each process's own; everything else stays (what peers of a
// job share and what a checkpoint must match).
TEST(ConfigTest, WithoutPerProcessFieldsClearsMemoryAndPlacementOnly) {
  config::DlrmConfig c = Valid();
  c.set_num_threads(3);
  c.set_memory_limit_bytes(1 << 30);
  c.set_ssd_dir("/tmp/x");
  c.mutable_device()->set_matmul_precision(config::DeviceConfig::MEDIUM);
  c.mutable_model()->mutable_tables(0)->mutable_ssd()->set_cache_bytes(4096);
  c.mutable_model()->mutable_tables(0)->mutable_ssd()->set_segment_bytes(1 << 20);
  const config::DlrmConfig job = WithoutPerProcessFields(c);
  EXPECT_FALSE(job.has_num_threads() || job.has_memory_limit_bytes() || job.has_ssd_dir() ||
               job.has_device());
  EXPECT_TRUE(job.model().tables(0).has_ssd());  // the table stays on the SSD tier
  EXPECT_FALSE(job.model().tables(0).ssd().has_cache_bytes() ||
               job.model().tables(0).ssd().has_segment_bytes());
  config::DlrmConfig back = job;  // and nothing else changed
  back.set_num_threads(3);
  back.set_memory_limit_bytes(1 << 30);
  back.set_ssd_dir("/tmp/x");
  *back.mutable_device() = c.device();
  back.mutable_model()->mutable_tables(0)->mutable_ssd()->set_cache_bytes(4096);
  back.mutable_model()->mutable_tables(0)->mutable_ssd()->set_segment_bytes(1 << 20);
  EXPECT_EQ(back.SerializeAsString(), c.SerializeAsString());
}

TEST(ConfigTest, LookaheadFollowsTheModeUnlessSet) {
  config::DistributedConfig d;
  EXPECT_EQ(Lookahead(d), 1);  // sync: the servers hold deeper lookups anyway
  d.set_mode(config::DistributedConfig::HYBRID);
  EXPECT_EQ(Lookahead(d), 2);  // the default staleness
  d.set_staleness(5);
  EXPECT_EQ(Lookahead(d), 5);
  d.set_staleness(1000);
  EXPECT_EQ(Lookahead(d), 64);  // at most what validation allows when set
  d.set_lookahead(0);
  EXPECT_EQ(Lookahead(d), 0);  // set: taken as it is
}

}  // namespace
}  // namespace dlrm
