// core/oncpu.cpp — validating and mapping the owner-on-CPU map (design:
// core/oncpu.h). Runs before main, possibly before malloc works: stack
// buffers and raw system calls only.
#include "core/oncpu.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/nocancel_io.h"

namespace lockswap::oncpu {
namespace {

constexpr unsigned kMapTypeArray = 2;     // BPF_MAP_TYPE_ARRAY
constexpr uint64_t kFlagMmapable = 1u << 10;  // BPF_F_MMAPABLE

// The number after "key:" (decimal, or hex with 0x), or `missing`.
uint64_t field(const char* text, const char* key, uint64_t missing) {
  const char* p = strstr(text, key);
  if (p == nullptr) return missing;
  p += strlen(key);
  while (*p == ' ' || *p == '\t') ++p;
  unsigned base = 10;
  if (p[0] == '0' && p[1] == 'x') base = 16, p += 2;
  uint64_t v = 0;
  bool any = false;
  for (;; ++p, any = true) {
    unsigned d;
    if (*p >= '0' && *p <= '9') d = static_cast<unsigned>(*p - '0');
    else if (base == 16 && *p >= 'a' && *p <= 'f') d = static_cast<unsigned>(*p - 'a' + 10);
    else break;
    v = v * base + d;
  }
  return any ? v : missing;
}

}  // namespace

const char* unusable_here() {
  char status[4096];
  if (nocancel::read_small_file("/proc/self/status", status, sizeof status) == 0)
    return "cannot read /proc/self/status to check the PID namespace";
  const char* ns = strstr(status, "NSpid:");
  if (ns == nullptr) return nullptr;  // kernel without PID namespaces
  const char* eol = strchr(ns, '\n');
  unsigned ids = 0;
  for (const char* p = ns + 6; p != eol && *p; ++p)
    if ((*p >= '0' && *p <= '9') && (p[-1] == ' ' || p[-1] == '\t')) ++ids;
  if (ids > 1) return "this process is in a nested PID namespace (the map is indexed by host thread ids)";
  return nullptr;
}

const char* attach(int fd) {
  if (const char* why = unusable_here()) return why;
  if (fd < 0) return "LOCKSWAP_ONCPU_FD is not a descriptor number";
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  char info[2048];
  if (nocancel::read_small_file(path, info, sizeof info) == 0)
    return "LOCKSWAP_ONCPU_FD names no open descriptor (closed by a parent?)";
  if (field(info, "map_type:", ~0ull) != kMapTypeArray || field(info, "key_size:", 0) != 4 ||
      field(info, "value_size:", 0) != ONCPU_MAP_VALUE_SIZE || !(field(info, "map_flags:", 0) & kFlagMmapable))
    return "LOCKSWAP_ONCPU_FD is not lockswap's owner-on-CPU map";
  uint64_t entries = field(info, "max_entries:", 0);
  if (entries < 2) return "LOCKSWAP_ONCPU_FD is not lockswap's owner-on-CPU map";
  std::size_t bytes = entries * ONCPU_MAP_VALUE_SIZE;
  void* m = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return "mmap of the owner-on-CPU map failed";
  MapView view{static_cast<const volatile uint8_t*>(m), (entries - 1) * ONCPU_TIDS_PER_ENTRY};
  if (*reinterpret_cast<const volatile uint64_t*>(view.bytes) != ONCPU_MAP_LIVE) {
    munmap(m, bytes);
    return "the owner-on-CPU map is not live (lockswap-oncpu stopped)";
  }
  g_map = view;
  return nullptr;
}

}  // namespace lockswap::oncpu
