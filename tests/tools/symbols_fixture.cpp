// tests/tools/symbols_fixture.cpp — a program that is never run: it only
// gives tests/tools/report_test.py an ELF file with debug info whose
// functions have known names, so a hand-written statistics fixture can point
// its `map` and `site` records into it and `lockswap report` must name them
// (through addr2line -f -C -i) when it ranks the sites.
#include <cstdio>

namespace lockswap_fixture {

// noinline: each function keeps its own symbol and line range at any -O.
[[gnu::noinline]] int hot_site_function(int n) {
  int acc = 0;
  for (int i = 0; i < n; ++i) acc += i * 3;
  return acc;
}

[[gnu::noinline]] int cold_site_function(int n) {
  int acc = 1;
  for (int i = 0; i < n; ++i) acc ^= i << 1;
  return acc;
}

[[gnu::noinline]] int request_handler(int n) { return hot_site_function(n) + cold_site_function(n); }

}  // namespace lockswap_fixture

int main(int argc, char**) {
  std::printf("%d\n", lockswap_fixture::request_handler(argc));
  return 0;
}
