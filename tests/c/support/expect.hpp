// EXPECT(cond) for the C++ contract tests (test-torch-alloc.cpp, test-rmm-owners.cpp): a
// failure prints the condition and counts; main returns nonzero if any failed.
#ifndef DEVMM_TEST_EXPECT_HPP
#define DEVMM_TEST_EXPECT_HPP

#include <cstdio>

inline int failures;

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

// The result line and exit status of a contract test.
inline int report() {
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

#endif
