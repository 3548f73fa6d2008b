// Deterministic fuzzing of the config text parser and validator (issue 17): the project's
// configs mutated token by token (numbers swapped for boundary values, field names for
// other field names, tokens dropped or repeated) and byte by byte, from fixed seeds. Every
// input must parse and validate, or be refused with a dlrm::Error of code
// INVALID_ARGUMENT, never a crash, another exception or an INTERNAL error (run under
// ASan/UBSan in the sanitizer build); a config that passes is then built into an engine
// when it is small, which must succeed or refuse it the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/engine.h"

namespace dlrm {
namespace {

constexpr int kInputs = 4000;
// Engines are built only for configs of at most this many table values (rows x dim).
constexpr double kMaxEngineValues = 2e6;

std::vector<std::string> SeedConfigs() {
  std::vector<std::string> seeds;
  for (const char* dir : {"/tools/configs", "/bench/configs", "/tests/data"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(DLRM_SOURCE_DIR) + dir)) {
      if (entry.path().extension() != ".pbtxt") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      seeds.push_back(text.str());
    }
  }
  return seeds;
}

// The text's tokens (quoted strings, words and numbers, single punctuation), comments
// dropped (joined with spaces they would run to the end). No <regex>: GCC 12 warns
// inside it (-Wmaybe-uninitialized) in the sanitizer build.
std::vector<std::string> Tokens(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  const auto word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
           c == '+';
  };
  while (i < text.size()) {
    const char c = text[i];
    size_t end = i + 1;
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '#') {
      while (end < text.size() && text[end] != '\n') ++end;
      i = end;
      continue;
    }
    if (c == '\'' || c == '"') {
      while (end < text.size() && text[end] != c) ++end;
      end = std::min(end + 1, text.size());
    } else if (word(c)) {
      while (end < text.size() && word(text[end])) ++end;
    }
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

std::string Join(const std::vector<std::string>& tokens) {
  std::string out;
  for (const std::string& t : tokens) out += t + " ";
  return out;
}

const char* const kBoundaryValues[] = {"0",
                                       "-1",
                                       "1",
                                       "2",
                                       "3",
                                       "7",
                                       "64",
                                       "2147483647",
                                       "2147483648",
                                       "-2147483649",
                                       "9223372036854775807",
                                       "9223372036854775808",
                                       "18446744073709551616",
                                       "1e12",
                                       "1e300",
                                       "-1e300",
                                       "nan",
                                       "inf",
                                       "-inf",
                                       "0.5",
                                       "1e-45",
                                       "-0",
                                       "1.0000001",
                                       "0x10",
                                       "''",
                                       "'t0'"};

bool IsNumber(const std::string& t) { return !t.empty() && (std::isdigit(t[0]) || t[0] == '-'); }

std::string Mutate(const std::string& seed, std::mt19937_64& rng) {
  std::vector<std::string> tokens = Tokens(seed);
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !tokens.empty(); ++e) {
    const size_t i = rng() % tokens.size();
    switch (rng() % 5) {
      case 0:  // a number (or anything) becomes a boundary value
        if (IsNumber(tokens[i]) || rng() % 4 == 0)
          tokens[i] = kBoundaryValues[rng() % std::size(kBoundaryValues)];
        break;
      case 1: tokens[i] = tokens[rng() % tokens.size()]; break;  // another token's text
      case 2: tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(i)); break;
      case 3: tokens.insert(tokens.begin() + static_cast<std::ptrdiff_t>(i), tokens[i]); break;
      default: {  // a byte flip inside the token
        std::string& t = tokens[i];
        t[rng() % t.size()] ^= static_cast<char>(1u << (rng() % 8));
      }
    }
  }
  return Join(tokens);
}

double TableValues(const config::DlrmConfig& c) {
  double values = 0;
  for (const auto& t : c.model().tables()) values += static_cast<double>(t.num_rows()) * t.dim();
  return values;
}

// Parse, validate and (small ones) build; returns whether the config was accepted.
bool TryConfig(const std::string& text) {
  try {
    const config::DlrmConfig c = ParseConfigText(text);
    ValidateConfig(c);
    if (TableValues(c) <= kMaxEngineValues && !c.device().has_kind()) Engine engine(c);
    return true;
  } catch (const Error& e) {
    if (e.code() != StatusCode::kInvalidArgument && e.code() != StatusCode::kResourceExhausted)
      ADD_FAILURE() << "refused with " << StatusCodeName(e.code()) << ": " << e.what() << "\n"
                    << text;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "escaped as " << e.what() << "\n" << text;
  }
  return false;
}

TEST(ConfigFuzz, EveryMutatedConfigIsAcceptedOrRefusedByName) {
  const std::vector<std::string> seeds = SeedConfigs();
  ASSERT_GE(seeds.size(), 4u);
  for (const std::string& seed : seeds) ASSERT_TRUE(TryConfig(seed)) << seed;
  std::mt19937_64 rng(17);
  int accepted = 0;
  for (int i = 0; i < kInputs; ++i)
    accepted += TryConfig(Mutate(seeds[static_cast<size_t>(i) % seeds.size()], rng)) ? 1 : 0;
  // Both outcomes must be reached, or the mutations test nothing.
  EXPECT_GT(accepted, kInputs / 50);
  EXPECT_LT(accepted, kInputs - kInputs / 50);
  std::cout << "config fuzz: " << kInputs << " inputs, " << accepted << " accepted\n";
}

}  // namespace
}  // namespace dlrm
