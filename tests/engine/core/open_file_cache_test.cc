// OpenFileCache (engine/core/open_file_cache.h): at most `capacity` files open, the least
// recently used closed first; a handle keeps its file open after the cache dropped it;
// Erase makes the next Get open the file anew, EraseUnder forgets a directory's files; a
// file that cannot be opened is kIo naming it, and the cache is unchanged.
#include "engine/core/open_file_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/status.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

// The first byte of the file behind `fd`.
char FirstByte(int fd) {
  char c = 0;
  EXPECT_EQ(::pread(fd, &c, 1, 0), 1);
  return c;
}

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

class OpenFileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("open_file_cache");
    for (char c : std::string("abcd")) std::ofstream(Path(c)) << c;
  }
  std::string Path(char c) const { return dir_ + "/" + c; }
  OpenFileCache::Handle Get(OpenFileCache& cache, char c) { return cache.Get(Path(c), O_RDONLY); }

  std::string dir_;
};

TEST_F(OpenFileCacheTest, TheLeastRecentlyUsedIsClosedFirst) {
  OpenFileCache cache(2);
  const int a = Get(cache, 'a')->get();
  const int b = Get(cache, 'b')->get();
  EXPECT_EQ(Get(cache, 'a')->get(), a);  // a hit, and now the most recent
  const int c = Get(cache, 'c')->get();  // closes b
  EXPECT_EQ(cache.size(), 2);
  EXPECT_TRUE(IsOpen(a));
  EXPECT_EQ(FirstByte(a), 'a');
  EXPECT_EQ(FirstByte(c), 'c');
  const OpenFileCache::Handle b_again = Get(cache, 'b');  // reopened; closes a
  EXPECT_EQ(FirstByte(b_again->get()), 'b');
  EXPECT_EQ(cache.size(), 2);
  (void)b;
}

TEST_F(OpenFileCacheTest, AHandleKeepsItsFileOpenAfterEviction) {
  OpenFileCache cache(1);
  const OpenFileCache::Handle a = Get(cache, 'a');
  const OpenFileCache::Handle b = Get(cache, 'b');  // the cache dropped a
  EXPECT_EQ(cache.size(), 1);
  ASSERT_TRUE(IsOpen(a->get()));
  EXPECT_EQ(FirstByte(a->get()), 'a');
  EXPECT_EQ(FirstByte(b->get()), 'b');
}

TEST_F(OpenFileCacheTest, EraseOpensTheReplacedFileAnew) {
  OpenFileCache cache(4);
  EXPECT_EQ(FirstByte(Get(cache, 'a')->get()), 'a');
  std::filesystem::remove(Path('a'));
  std::ofstream(Path('a')) << 'z';
  EXPECT_EQ(FirstByte(Get(cache, 'a')->get()), 'a');  // still the removed file
  cache.Erase(Path('a'));
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(FirstByte(Get(cache, 'a')->get()), 'z');
  cache.Erase(Path('q'));  // not cached: nothing
  EXPECT_EQ(cache.size(), 1);
}

TEST_F(OpenFileCacheTest, AFileThatCannotBeOpenedIsNamedAndChangesNothing) {
  OpenFileCache cache(2);
  const int a = Get(cache, 'a')->get();
  testing::ExpectError([&] { cache.Get(dir_ + "/missing", O_RDONLY); }, StatusCode::kIo,
                       dir_ + "/missing: cannot open: No such file or directory");
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(Get(cache, 'a')->get(), a);
}

// Threads getting, reading and erasing a few files through a cache smaller than them
// (the ThreadSanitizer build runs this): every read sees its own file.
TEST_F(OpenFileCacheTest, ConcurrentGetsReadTheirOwnFiles) {
  OpenFileCache cache(2);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const char c = "abcd"[(t + i) % 4];
        if (FirstByte(Get(cache, c)->get()) != c) ++wrong;
        if (i % 50 == 0) cache.Erase(Path("abcd"[t]));
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.size(), 2);
}

// A closing store drops its directory's files, and only those.
TEST_F(OpenFileCacheTest, EraseUnderForgetsADirectorysFiles) {
  OpenFileCache cache(8);
  const std::string sub = dir_ + "/sub";
  std::filesystem::create_directories(sub);
  std::ofstream(sub + "/x") << 'x';
  std::ofstream(dir_ + "/subway") << 'w';  // shares the prefix "sub", not the directory
  cache.Get(sub + "/x", O_RDONLY);
  cache.Get(dir_ + "/subway", O_RDONLY);
  Get(cache, 'a');
  cache.EraseUnder(sub);
  EXPECT_EQ(cache.size(), 2);
  cache.EraseUnder(dir_);
  EXPECT_EQ(cache.size(), 0);
}

TEST(OpenFileCacheDefault, IsAQuarterOfTheDescriptorLimit) {
  struct rlimit limit;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= 64) {
    EXPECT_EQ(OpenFileCache::DefaultCapacity(), static_cast<int64_t>(limit.rlim_cur / 4));
  }
  EXPECT_GE(OpenFileCache::DefaultCapacity(), 16);
}

}  // namespace
}  // namespace dlrm
