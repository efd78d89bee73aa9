// preload/stats/dump.cpp — the machine records of a statistics dump
// (format `lockswap-v1`; `lockswap report` is its reader).
//
// Format
// ------
// A dump is one block of lines written with one write(2) (O_APPEND) after the
// human "lockswap: ..." lines; a process may write several (signal, exit),
// each a complete cumulative snapshot: readers keep the last per (pid,
// start_ns). Machine lines are "lockswap-v1 <record> key=value ..."; values
// never hold spaces, control bytes or '=' (paths percent-encode every byte
// <= 0x20, '%' and 0x7f as %XX, upper-case hex); numbers are decimal unless
// 0x-prefixed; readers ignore unknown records and keys.
//
//   record  | keys
//   --------+-----------------------------------------------------------------
//   begin   | pid seq start_ns now_ns (CLOCK_REALTIME) mutex rwlock sem cid
//           | wtlock stats (counts|profile) exe
//   calls   | family (mutex|rwlock|cond|sem|wtlock) calls — one per family, even 0
//   lwlock  | id tranche variant acq missed waits wait_ns hold_samples
//           | hold_ns — per PostgreSQL LWLock tranche, counts mode and up
//           | (preload/lwlock/; id -1: every extension tranche)
//   wtlock  | addr kind(=wtlock) variant [first_ip] acq rd_acq contended
//           | rd_contended wait_ns wait_max_ns hold_samples hold_ns — per
//           | WiredTiger rwlock, counts mode (preload/wtlock/; profile has
//           | lock records of kind wtlock instead)
//   event   | name count — non-zero lock events (core/lock_events_list.h)
//   rule    | index text unattributed — a LOCKSWAP_SELECT rule ('=' as %3D)
//           | and how many locks it chose found no event counters of their own
//   selected| addr family variant rule events — a lock a rule chose, with the
//           | lock events of its own calls (name:count;... or -), which the
//           | event records count as well
//   lock    | id addr kind acq contended wait_ns wait_max_ns wait_hist hold_ns
//           | hold_max_ns hold_hist [rd_acq rd_contended: rwlocks]
//   site    | id lock(=lock id) ip op acq contended wait_* hold_* [bt=ip,ip,...]
//   wait    | kind (futex|cond|idle|delay) call ip n ns max_ns [bt=ip,ip,...]
//           | — one per call site of a wait outside lockswap's locks
//           | (preload/stats/waits.h): `call` the interposed function, `ip` its
//           | caller, `n` waits, `ns` their total wall time, `max_ns` the
//           | longest; `bt` (delay sites) up to 4 callers of the caller
//   map     | start end offset path — executable file mappings (ip -> file offset)
//   dropped | locks sites — acquisitions that found no room in the tables,
//           | plus entries that did not fit the dump; signals — statistics
//           | signals dropped by the rate limit; waits — waits at sites the
//           | wait table had no room for, plus sites that did not fit the dump
//   end     | pid seq
//
// stats=counts (LOCKSWAP_STATS=1|counts, or a bare LOCKSWAP_STATS_FILE) has
// begin, event, wait, lwlock, wtlock, dropped and end: calls, lock and site
// records come from the profiler, which counts does not install. map records
// are written by the profiler and, in counts, whenever a wait or wtlock
// record is (readers symbolize a wait's ip and a lock's first_ip through them).
//
// Before the machine records, one human line per wait kind that has sites:
// "lockswap: waits <kind> sites=N n=N ns=NS".
//
// Histograms: bucket i counts values v (ns) with floor(log2(max(v,1))) == i,
// i < 48, written sparse as "i:n;i:n" ("-" when empty). Wait samples are
// contended acquisitions (cond sites: every wait); hold samples are
// exclusive holds (preload/stats/stats.cpp says what is measured where). ip and
// backtrace entries are return addresses: symbolize ip-1.
//
// Runs at exit and in the LOCKSWAP_STATS_SIGNAL handler, so everything here
// is async-signal-safe in practice: numbers are formatted by hand into the
// caller's buffer, /proc/self/maps and /proc/self/exe are read with
// open/read/readlink, nothing allocates, locks or touches stdio. Counters are
// read with relaxed loads while other threads keep counting: each record is
// a consistent-enough snapshot, never a torn value.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "arch/clock.h"
#include "core/cid.h"
#include "core/lock_events.h"
#include "core/nocancel_io.h"
#include "core/oncpu.h"
#include "core/thread_registry.h"
#include "preload/abi.h"
#include "preload/stats/selected.h"
#include "preload/config/config.h"
#include "preload/config/select.h"
#include "preload/diag.h"
#include "preload/stats/stats.h"
#include "preload/stats/table.h"
#include "preload/stats/waits.h"

namespace lockswap::stats {

// ---------------------------------------------------------------------- Out

void Out::put(const char* s, size_t n) {
  if (n > cap - len) {
    n = cap - len;
    truncated = true;
  }
  memcpy(text + len, s, n);
  len += n;
}
void Out::put(const char* s) { put(s, strlen(s)); }

void Out::dec(uint64_t v) {
  char b[20];
  int i = sizeof b;
  do b[--i] = static_cast<char>('0' + v % 10); while ((v /= 10) != 0);
  put(b + i, sizeof b - static_cast<size_t>(i));
}

void Out::hex(uint64_t v) {
  char b[18];
  int i = sizeof b;
  do b[--i] = "0123456789abcdef"[v & 15]; while ((v >>= 4) != 0);
  b[--i] = 'x';
  b[--i] = '0';
  put(b + i, sizeof b - static_cast<size_t>(i));
}

void Out::key_dec(const char* key, uint64_t v) {
  put(" ");
  put(key);
  put("=");
  dec(v);
}

void Out::key_hex(const char* key, uint64_t v) {
  put(" ");
  put(key);
  put("=");
  hex(v);
}

void Out::dec_right(uint64_t v, unsigned width) {
  unsigned digits = 1;
  for (uint64_t x = v; x >= 10; x /= 10) ++digits;
  for (; digits < width; ++digits) put(" ");
  dec(v);
}

void Out::put_left(const char* s, unsigned width) {
  size_t n = strlen(s);
  put(s, n);
  for (; n < width; ++n) put(" ");
}

void Out::escaped(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c > 0x20 && c < 0x7f && c != '%') {  // bytes >= 0x80 too: a UTF-8 C1 control moves a terminal
      put(s + i, 1);
      continue;
    }
    const char code[3] = {'%', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]};
    put(code, sizeof code);
  }
}

void Out::key_path(const char* key, const char* path, size_t n) {
  put(" ");
  put(key);
  put("=");
  escaped(path, n);
}

namespace {

constexpr size_t kFixedBound = 1 << 20;  // begin, calls, events, maps, dropped, end
constexpr size_t kTailReserve = 1 << 19;  // kept free for maps, dropped and end

uint64_t load(const Counter& c) { return c.load(std::memory_order_relaxed); }

uint64_t realtime_ns() { return arch::clock_ns(CLOCK_REALTIME); }

std::atomic<uint64_t> g_seq{0};

}  // namespace

void record_start(Out& o, const char* type) {
  o.put("lockswap-v1 ");
  o.put(type);
}

namespace {

// What a dump's begin and dropped records say besides the tables.
struct DumpHeader {
  const char* mutex;
  const char* rwlock;
  const char* sem;
  const char* cid;
  bool profile;                  // stats=profile: lock, site, calls and map records follow
  uint64_t signals_dropped;      // statistics signals that came too soon after a dump
  const char* wtlock;            // LOCKSWAP_WTLOCK (preload/wtlock/)
};

// The sections of the families outside the ops table (add_section).
const Section* g_sections[kMaxSections];
std::atomic<unsigned> g_section_count{0};

template <class Fn>
void for_each_section(Fn&& fn) {
  unsigned n = g_section_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < n; ++i) fn(*g_sections[i]);
}

void section_headings(Out& o) {
  for_each_section([&](const Section& s) {
    if (s.heading != nullptr) s.heading(o);
  });
}

void hist(Out& o, const char* key, const Timing& t) {
  o.put(" ");
  o.put(key);
  o.put("=");
  bool any = false;
  for (unsigned i = 0; i < kHistBuckets; ++i) {
    uint64_t n = load(t.hist[i]);
    if (n == 0) continue;
    if (any) o.put(";");
    o.dec(i);
    o.put(":");
    o.dec(n);
    any = true;
  }
  if (!any) o.put("-");
}

void timings(Out& o, const Timing& wait, const Timing& hold) {
  o.key_dec("wait_ns", load(wait.sum));
  o.key_dec("wait_max_ns", load(wait.max));
  hist(o, "wait_hist", wait);
  o.key_dec("hold_ns", load(hold.sum));
  o.key_dec("hold_max_ns", load(hold.max));
  hist(o, "hold_hist", hold);
}

// The variant a lock ran: its selection tag, else its family's setting.
const char* variant_of(Kind kind, uint8_t tag) {
  tag &= abi::kTagVariantMask;
  switch (kind) {
    case Kind::mutex: return variant_name(tag ? static_cast<MutexVariant>(tag) : g_config.mutex);
    case Kind::rwlock: return variant_name(tag ? static_cast<RwlockVariant>(tag) : g_config.rwlock);
    case Kind::sem: return variant_name(tag ? static_cast<SemVariant>(tag) : g_config.sem);
    case Kind::wtlock: return variant_name(g_config.wtlock);  // no LOCKSWAP_SELECT rules
    default: return nullptr;  // a condition variable runs with its mutex
  }
}

void lock_record(Out& o, uint32_t index, const LockEntry& e) {
  auto kind = static_cast<Kind>(e.kind.load(std::memory_order_relaxed));
  record_start(o, "lock");
  o.key_dec("id", index + 1);
  o.key_hex("addr", e.addr.load(std::memory_order_relaxed));
  o.put(" kind=");
  o.put(kKindNames[static_cast<unsigned>(kind)]);
  if (const char* v = variant_of(kind, e.variant.load(std::memory_order_relaxed))) {
    o.put(" variant=");
    o.put(v);
  }
  if (uintptr_t ip = e.first_ip.load(std::memory_order_relaxed)) o.key_hex("first_ip", ip);
  o.key_dec("acq", load(e.acq));
  o.key_dec("contended", load(e.contended));
  timings(o, e.wait, e.hold);
  if (kind == Kind::rwlock || kind == Kind::wtlock) {
    o.key_dec("rd_acq", load(e.rd_acq));
    o.key_dec("rd_contended", load(e.rd_contended));
  }
  o.put("\n");
}

void site_record(Out& o, uint32_t index, const SiteEntry& e) {
  record_start(o, "site");
  o.key_dec("id", index + 1);
  o.key_dec("lock", e.lock_slot.load(std::memory_order_relaxed) + 1);
  o.key_hex("ip", e.ip.load(std::memory_order_relaxed));
  o.put(" op=");
  o.put(kOpNames[e.op.load(std::memory_order_relaxed)]);
  o.key_dec("acq", load(e.acq));
  o.key_dec("contended", load(e.contended));
  timings(o, e.wait, e.hold);
  uint32_t n = e.bt_len.load(std::memory_order_acquire);
  if (n > kBacktraceDepth) n = kBacktraceDepth;
  if (n != 0) {
    o.put(" bt=");
    for (uint32_t i = 0; i < n; ++i) {
      if (i != 0) o.put(",");
      o.hex(e.bt[i].load(std::memory_order_relaxed));
    }
  }
  o.put("\n");
}

bool used(const LockEntry& e) {
  return e.state.load(std::memory_order_acquire) == kReady && (load(e.acq) != 0 || load(e.contended) != 0);
}
bool used(const SiteEntry& e) {
  return e.state.load(std::memory_order_acquire) == kReady && (load(e.acq) != 0 || load(e.contended) != 0);
}

// ------------------------------------------------------------ maps records

uint64_t parse_hex(const char*& p, const char* end) {
  uint64_t v = 0;
  for (; p < end; ++p) {
    char c = *p;
    unsigned d;
    if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
    else break;
    v = v << 4 | d;
  }
  return v;
}

const char* skip_field(const char* p, const char* end) {
  while (p < end && *p != ' ') ++p;
  while (p < end && *p == ' ') ++p;
  return p;
}

// One /proc/self/maps line: "start-end perms offset dev inode   path".
void map_line(Out& o, const char* p, const char* end) {
  const char* q = p;
  uint64_t start = parse_hex(q, end);
  if (q >= end || *q != '-') return;
  ++q;
  uint64_t stop = parse_hex(q, end);
  ++q;
  if (end - q < 4 || q[2] != 'x') return;  // executable mappings only
  q = skip_field(q, end);
  uint64_t offset = parse_hex(q, end);
  q = skip_field(q, end);  // offset
  q = skip_field(q, end);  // dev
  q = skip_field(q, end);  // inode
  if (q >= end || *q != '/') return;  // anonymous, [vdso], ...
  record_start(o, "map");
  o.key_hex("start", start);
  o.key_hex("end", stop);
  o.key_hex("offset", offset);
  o.put(" path=");
  // The kernel writes a newline in a mapped file's name as "\012".
  for (const char* c = q; c < end; ++c) {
    bool newline = end - c >= 4 && memcmp(c, "\\012", 4) == 0;
    o.escaped(newline ? "\n" : c, 1);
    if (newline) c += 3;
  }
  o.put("\n");
}

void map_records(Out& o, char* buf) {
  int fd = nocancel::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t have = 0;
  for (;;) {
    ssize_t n = nocancel::read(fd, buf + have, kScratchBytes - have);
    if (n <= 0) break;
    have += static_cast<size_t>(n);
    size_t begin = 0;
    for (size_t i = 0; i < have; ++i) {
      if (buf[i] != '\n') continue;
      map_line(o, buf + begin, buf + i);
      begin = i + 1;
    }
    memmove(buf, buf + begin, have - begin);
    have -= begin;
    if (have == kScratchBytes) have = 0;  // a line longer than the buffer: dropped
  }
  nocancel::close(fd);
}

void begin_record(Out& o, uint64_t seq, const DumpHeader& h, char* exe) {
  record_start(o, "begin");
  o.key_dec("pid", static_cast<uint64_t>(getpid()));
  o.key_dec("seq", seq);
  o.key_dec("start_ns", g_start_ns.load(std::memory_order_relaxed));
  o.key_dec("now_ns", realtime_ns());
  o.put(" mutex=");
  o.put(h.mutex);
  o.put(" rwlock=");
  o.put(h.rwlock);
  o.put(" sem=");
  o.put(h.sem);
  o.put(" cid=");
  o.put(h.cid);
  if (h.wtlock != nullptr) {
    o.put(" wtlock=");
    o.put(h.wtlock);
  }
  section_headings(o);
  o.put(h.profile ? " stats=profile" : " stats=counts");
  ssize_t n = readlink("/proc/self/exe", exe, kScratchBytes);
  if (n > 0) o.key_path("exe", exe, static_cast<size_t>(n));
  o.put("\n");
}

void call_records(Out& o) {
  for (unsigned f = 0; f < kKinds; ++f) {
    uint64_t total = 0;
    for (const CallStripe& s : g_calls) total += load(s.calls[f]);
    record_start(o, "calls");
    o.put(" family=");
    o.put(kKindNames[f]);
    o.key_dec("calls", total);
    o.put("\n");
  }
}

void event_records(Out& o) {
#if LOCKSWAP_LOCK_EVENTS
  for (uint32_t i = 0; i < kNumLockEvents; ++i) {
    uint64_t v = lockevent_total(static_cast<LockEvent>(i));
    if (v == 0) continue;
    record_start(o, "event");
    o.put(" name=");
    o.put(kLockEventNames[i]);
    o.key_dec("count", v);
    o.put("\n");
  }
#else
  (void)o;
#endif
}

// A LOCKSWAP_SELECT rule's text: escaped, and '=' too (values never hold one).
void put_rule_text(Out& o, const char* text) {
  for (const char* c = text; *c != '\0'; ++c) *c == '=' ? o.put("%3D") : o.escaped(c, 1);
}

Kind kind_of(select::Family f) {
  switch (f) {
    case select::Family::rwlock: return Kind::rwlock;
    case select::Family::sem: return Kind::sem;
    default: return Kind::mutex;
  }
}

// The rules, then the lock events of each lock a rule chose (events=
// name:count;... or "-"), counted apart from the process's event records.
void selected_records(Out& o) {
  for (int r = 0; r < select::rule_count(); ++r) {
    record_start(o, "rule");
    o.key_dec("index", static_cast<uint64_t>(r));
    o.put(" text=");
    put_rule_text(o, select::rule_text(r));
    o.key_dec("unattributed", stats::unattributed_locks(r));
    o.put("\n");
  }
  stats::SelectedLockView v;
  for (int i = 0; i < stats::kMaxSelectedLocks; ++i) {
    if (!stats::selected_entry(i, v)) continue;
    record_start(o, "selected");
    o.key_hex("addr", v.addr);
    Kind kind = kind_of(v.family);
    o.put(" family=");
    o.put(kKindNames[static_cast<unsigned>(kind)]);
    o.put(" variant=");
    o.put(variant_of(kind, v.variant));
    o.key_dec("rule", static_cast<uint64_t>(v.rule));
    o.put(" events=");
    bool any = false;
    for (uint32_t e = 0; e < kNumLockEvents; ++e) {
      if (v.events[e] == 0) continue;
      if (any) o.put(";");
      o.put(kLockEventNames[e]);
      o.put(":");
      o.dec(v.events[e]);
      any = true;
    }
    if (!any) o.put("-");
    o.put("\n");
  }
}

// --------------------------------------------------------- wait records

bool used(const waits::Site& s) {
  return s.key.load(std::memory_order_acquire) != 0 && s.ready.load(std::memory_order_acquire) != 0 &&
         s.n.load(std::memory_order_relaxed) != 0;
}

unsigned used_waits() {
  unsigned n = 0;
  for (unsigned i = 0; i < waits::kSlots; ++i) n += used(waits::sites()[i]);
  return n;
}

void wait_record(Out& o, const waits::Site& s) {
  uint64_t key = s.key.load(std::memory_order_relaxed);
  unsigned kind = static_cast<unsigned>(key >> 56) - 1;
  record_start(o, "wait");
  o.put(" kind=");
  o.put(kind < waits::kKinds ? waits::kKindNames[kind] : "unknown");
  o.put(" call=");
  o.put(s.call != nullptr ? s.call : "unknown");
  o.key_hex("ip", key & ((1ull << 56) - 1));
  o.key_dec("n", s.n.load(std::memory_order_relaxed));
  o.key_dec("ns", s.ns.load(std::memory_order_relaxed));
  o.key_dec("max_ns", s.max_ns.load(std::memory_order_relaxed));
  uint32_t n = s.bt_len < waits::kBacktraceDepth ? s.bt_len : waits::kBacktraceDepth;
  if (n != 0) {
    o.put(" bt=");
    for (uint32_t i = 0; i < n; ++i) {
      if (i != 0) o.put(",");
      o.hex(s.bt[i]);
    }
  }
  o.put("\n");
}

// The human summary: one line per kind that has sites.
void wait_summary(Out& o) {
  uint64_t n[waits::kKinds], ns[waits::kKinds], sites[waits::kKinds] = {};
  waits::totals(n, ns);
  for (unsigned i = 0; i < waits::kSlots; ++i) {
    const waits::Site& s = waits::sites()[i];
    if (!used(s)) continue;
    unsigned kind = static_cast<unsigned>(s.key.load(std::memory_order_relaxed) >> 56) - 1;
    if (kind < waits::kKinds) ++sites[kind];
  }
  for (unsigned k = 0; k < waits::kKinds; ++k) {
    if (sites[k] == 0) continue;
    o.put("lockswap: waits ");
    o.put_left(waits::kKindNames[k], 5);
    o.key_dec("sites", sites[k]);
    o.key_dec("n", n[k]);
    o.key_dec("ns", ns[k]);
    o.put("\n");
  }
}

size_t records_bound() {
  size_t entries = 0;
  if (const Tables* t = g_tables) {
    for (const LockEntry& e : t->locks) entries += used(e);
    for (const SiteEntry& e : t->sites) entries += used(e);
  }
  entries += used_waits();
  size_t sections = 0;
  for_each_section([&](const Section& s) { sections += s.bound(); });
  return kFixedBound + entries * kRecordBound + sections;
}

// Acquisitions that found no room in a table (per-thread counters, see
// preload/stats/table.h); 0 when lock events are compiled out.
uint64_t untracked([[maybe_unused]] LockEvent e) {
#if LOCKSWAP_LOCK_EVENTS
  return lockevent_total(e);
#else
  return 0;
#endif
}

void format_records(Out& o, const DumpHeader& h, char* scratch) {
  if (g_start_ns.load(std::memory_order_relaxed) == 0) g_start_ns.store(realtime_ns(), std::memory_order_relaxed);
  uint64_t seq = g_seq.fetch_add(1, std::memory_order_relaxed) + 1;
  wait_summary(o);
  begin_record(o, seq, h, scratch);
  if (h.profile) call_records(o);
  event_records(o);
  selected_records(o);
  Tally sections;
  bool sections_name_code = false;
  for_each_section([&](const Section& s) {
    Tally t;
    s.records(o, t);
    sections.written += t.written;
    sections.unwritten += t.unwritten;
    sections_name_code |= s.names_code && t.written != 0;
  });
  const Tables* t = h.profile ? g_tables : nullptr;
  uint64_t unwritten_locks = 0, unwritten_sites = 0;
  if (t != nullptr) {
    for (uint32_t i = 0; i < kLockSlots; ++i)
      if (used(t->locks[i])) room(o) ? lock_record(o, i, t->locks[i]) : void(++unwritten_locks);
    for (uint32_t i = 0; i < kSiteSlots; ++i)
      if (used(t->sites[i])) room(o) ? site_record(o, i, t->sites[i]) : void(++unwritten_sites);
  }
  uint64_t wait_sites = 0, unwritten_waits = 0;
  for (unsigned i = 0; i < waits::kSlots; ++i) {
    const waits::Site& s = waits::sites()[i];
    if (!used(s)) continue;
    if (room(o)) {
      wait_record(o, s);
      ++wait_sites;
    } else {
      unwritten_waits += s.n.load(std::memory_order_relaxed);
    }
  }
  if (h.profile || wait_sites != 0 || sections_name_code) map_records(o, scratch);
  record_start(o, "dropped");
  o.key_dec("locks", untracked(LockEvent::stats_lock_untracked) + unwritten_locks + sections.unwritten);
  o.key_dec("sites", untracked(LockEvent::stats_site_untracked) + unwritten_sites);
  o.key_dec("signals", h.signals_dropped);
  o.key_dec("waits", waits::dropped() + unwritten_waits);
  o.put("\n");
  record_start(o, "end");
  o.key_dec("pid", static_cast<uint64_t>(getpid()));
  o.key_dec("seq", seq);
  o.put("\n");
}

}  // namespace

// Room for one more record and the tail? (Entries created after
// records_bound() was computed may not fit; they are counted.)
bool room(const Out& o) { return o.cap - o.len >= kRecordBound + kTailReserve; }

void add_section(const Section& s) {
  unsigned n = g_section_count.load(std::memory_order_relaxed);
  if (n == kMaxSections) return;
  g_sections[n] = &s;
  g_section_count.store(n + 1, std::memory_order_release);
}

// ------------------------------------------------------------- the writer

namespace {

// Statistics: kernel lock_event_counts style, one "name count" line per
// non-zero event, plus the variants that produced them; then the machine
// records of preload/stats/dump.cpp. A dump is written with one write(2)
// from a buffer mapped for it, so processes of a forking server that exit
// together (O_APPEND) never interleave their lines. It runs at exit and in
// the LOCKSWAP_STATS_SIGNAL handler, so it is async-signal-safe in practice:
// numbers formatted by hand, no malloc, no stdio, strerrordesc_np (a static
// string) for errors, large buffers in the mapping rather than on the stack
// (the handler may run on a small alternate stack); and it never acts on the
// interrupted thread's pending cancellation (core/nocancel_io.h).
void fill_stats(Out& o, char* scratch, uint64_t signals_dropped) {
  o.put("lockswap: pid ");
  o.dec(static_cast<uint64_t>(getpid()));
  const char* const pairs[][2] = {{" mutex=", variant_name(g_config.mutex)},
                                  {" rwlock=", variant_name(g_config.rwlock)},
                                  {" sem=", variant_name(g_config.sem)},
                                  {" cid=", variant_name(cid::mode())}};
  for (const auto& kv : pairs) {
    o.put(kv[0]);
    o.put(kv[1]);
  }
  if (cid::rseq_fell_back()) o.put(" (LOCKSWAP_CID=rseq: no kernel mm_cid, percpu used)");
  if (g_config.wtlock != WtlockVariant::off && g_config.wtlock != WtlockVariant::unset) {
    o.put(" wtlock=");  // said only when asked for: WiredTiger's rwlocks are swapped
    o.put(variant_name(g_config.wtlock));
  }
  section_headings(o);  // e.g. PostgreSQL's LWLocks run on lockswap's algorithms
  o.put(" oncpu=");
  o.put(oncpu::source_name(oncpu::source()));
  o.put(g_config.profile ? " stats=profile\n" : " stats=counts\n");
#if LOCKSWAP_LOCK_EVENTS
  for (uint32_t i = 0; i < kNumLockEvents; ++i) {
    uint64_t v = lockevent_total(static_cast<LockEvent>(i));
    if (v == 0) continue;
    o.put("lockswap: ");
    o.put_left(kLockEventNames[i], 24);
    o.put(" ");
    o.dec_right(v, 12);
    o.put("  ");
    o.put(kLockEventMeanings[i]);
    o.put("\n");
  }
#else
  o.put("lockswap: lock events were compiled out (LOCKSWAP_LOCK_EVENTS=OFF)\n");
#endif
  if (signals_dropped != 0) {
    o.put("lockswap: ");
    o.dec(signals_dropped);
    o.put(" statistics signal(s) dropped: at most one dump per 100 ms\n");
  }
  DumpHeader h{variant_name(g_config.mutex), variant_name(g_config.rwlock), variant_name(g_config.sem),
                      variant_name(cid::mode()),   g_config.profile,               signals_dropped,
                      variant_name(g_config.wtlock)};
  format_records(o, h, scratch);
}

bool has_pid_pattern(const char* p) { return strstr(p, "%p") != nullptr; }

// LOCKSWAP_STATS_FILE with every "%p" replaced by the pid (one file per
// process of a forking server), into `out` (kScratchBytes). False if it does
// not fit.
bool expand_stats_path(char* out) {
  char pid[16];
  Out pid_text{pid, sizeof pid};
  pid_text.dec(static_cast<uint64_t>(getpid()));
  size_t n = 0;
  for (const char* p = g_config.stats_file; *p; ++p) {
    const char* piece = p;
    size_t len = 1;
    if (p[0] == '%' && p[1] == 'p') {
      piece = pid;
      len = pid_text.len;
      ++p;
    }
    if (n + len >= kScratchBytes) return false;
    memcpy(out + n, piece, len);
    n += len;
  }
  out[n] = '\0';
  return true;
}

// The process that created this pid's file (O_EXCL): its later dumps append.
std::atomic<pid_t> g_created_by{0};

// Why the opened statistics file is not one to write to, or null. Only a
// regular file the effective user owns with no other name: a FIFO would
// block the exit, a hard link or someone else's file would put lockswap's
// output where the caller of a program cannot write themselves.
const char* unsuitable(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return "cannot stat it";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != geteuid()) return "owned by another user";
  if (st.st_nlink != 1) return "a file with more than one link";
  return nullptr;
}

std::atomic<bool> g_open_failure_reported{false};

void report_open_failure(const char* path, const char* why) {
  if (g_open_failure_reported.exchange(true)) return;
  char text[640];
  Out m{text, sizeof text - 1};
  m.put("lockswap: cannot open LOCKSWAP_STATS_FILE=");
  m.escaped(path, strnlen(path, 256));
  m.put(" (");
  m.put(why);
  m.put("); statistics follow on stderr");
  text[m.len] = '\n';
  diag(text, m.len + 1);
}

// The statistics file, or lockswap's stderr (-1: none) with a one-line
// reason when it cannot be used (once per process, never silently dropped).
// `path` is scratch room (kScratchBytes).
int open_stats_fd(char* path) {
  if (g_config.stats_file == nullptr || *g_config.stats_file == '\0') return diag_fd();
  if (!expand_stats_path(path)) {
    report_open_failure(g_config.stats_file, strerrordesc_np(ENAMETOOLONG));
    return diag_fd();
  }
  // A fresh pid's file must not exist yet: one planted there is refused.
  bool fresh = has_pid_pattern(g_config.stats_file) && g_created_by.load() != getpid();
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (fresh ? O_EXCL : 0);
  int fd = nocancel::open(path, flags, 0600);
  const char* why = fd < 0 ? strerrordesc_np(errno) : unsuitable(fd);
  if (why == nullptr) {
    if (fresh) g_created_by.store(getpid());
    return fd;
  }
  if (fd >= 0) nocancel::close(fd);
  report_open_failure(path, why);
  return diag_fd();
}

void write_all(int fd, const char* p, size_t n) {
  while (n != 0) {
    ssize_t w = nocancel::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

constexpr size_t kHumanLinesBound = 64 * 1024;

}  // namespace

void write_dump(uint64_t signals_dropped) {
  size_t cap = kHumanLinesBound + records_bound();
  size_t bytes = cap + kScratchBytes;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    diag("lockswap: cannot map a buffer for the statistics\n");
    return;
  }
  char* scratch = static_cast<char*>(mem) + cap;
  Out o{static_cast<char*>(mem), cap};
  fill_stats(o, scratch, signals_dropped);
  int fd = open_stats_fd(scratch);
  if (fd >= 0) write_all(fd, o.text, o.len);
  if (fd >= 0 && fd != diag_fd()) nocancel::close(fd);
  munmap(mem, bytes);
}


}  // namespace lockswap::stats
