// preload/boot.cpp — the start: parse the settings, start what they chose,
// publish them. Once, under one guard, before the first lock uses a choice.
//
// Parsing (config/config.cpp) only reads; here the choices take effect, in
// the order their users need: a PostgreSQL's LWLocks are redirected (or
// refused) before main, the concurrency-id allocator is chosen before the
// first fork (`global` maps its shared page), the owner-on-CPU source before
// the first spinner reads it; only then are the families' choices published,
// so no lock runs a choice whose machinery is not started.
#include <sched.h>
#include <string.h>

#include <atomic>

#include "core/cid.h"
#include "core/oncpu.h"
#include "preload/config/config.h"
#include "preload/diag.h"
#include "preload/lwlock/lwlock.h"

namespace lockswap {

namespace {

void tell(const char* s) { diag(s, strlen(s)); }

// LOCKSWAP_ONCPU: auto takes the map when it is usable, bpf insists on it
// (unless LOCKSWAP_ONCPU_STRICT=0).
void select_oncpu(OncpuMode mode, int oncpu_fd) {
  if (mode == OncpuMode::off || mode == OncpuMode::rseq) {
    oncpu::g_source = mode == OncpuMode::off ? oncpu::Source::off : oncpu::Source::rseq;
    return;
  }
  const char* why = "LOCKSWAP_ONCPU_FD is not set: run under `lockswap-oncpu exec` or `lockswap --oncpu` (as root)";
  if (oncpu_fd >= 0) why = oncpu::attach(oncpu_fd);
  if (why == nullptr) {
    oncpu::g_source = oncpu::Source::bpf;
    return;
  }
  oncpu::g_source = oncpu::Source::rseq;
  if (mode != OncpuMode::bpf) return;
  if (g_config.oncpu_strict) config_error("LOCKSWAP_ONCPU", "bpf", why);
  // Inherited from `lockswap --oncpu` by a process that cannot use the map
  // (a daemon's child that closed its descriptors): it runs on, and says so.
  tell("lockswap: LOCKSWAP_ONCPU=bpf (LOCKSWAP_ONCPU_STRICT=0): ");
  tell(why);
  tell("; using rseq\n");
}

void boot(const Choices& c) {
  lwlock::start(c.lwlock);  // a PostgreSQL's LWLocks: redirected (or refused) here, before main
  cid::g_say_hook.store(static_cast<void (*)(const char*, size_t)>(&diag), std::memory_order_release);  // a stalled cid_lock
  cid::select(c.cid);
  cid::set_switch_model(g_config.cid_switch);
  select_oncpu(c.oncpu, c.oncpu_fd);
}

std::atomic<int> g_loading{0};
std::atomic<bool> g_loaded{false};

}  // namespace

void load_config() {
  // First caller parses; concurrent first callers wait (parsing takes
  // microseconds and cannot block).
  int expected = 0;
  if (!g_loading.compare_exchange_strong(expected, 1)) {
    while (!g_loaded.load(std::memory_order_acquire)) sched_yield();
    return;
  }
  take_diag_fd();
  Choices c = parse_settings();
  boot(c);
  publish(c);
  // Nothing will be said after start-up, but for a stalled global cid_lock.
  if (!g_config.stats && c.cid != CidMode::global) drop_diag_fd();
  g_loaded.store(true, std::memory_order_release);
}

}  // namespace lockswap
