// core/oncpu.h — is a given thread on a CPU right now? (the kernel's
// owner_on_cpu(), for spinners; LOCKSWAP_ONCPU=auto|bpf|rseq|off).
//
// Design
// ------
// Sources, chosen once at start-up (preload/config/config.cpp):
//
//   bpf   exact: one eBPF program for the whole machine
//         (tools/oncpu/oncpu.bpf.c) on raw tracepoint sched_switch writes,
//         per host thread id, RUNNING / PREEMPTED (runnable, waiting for a
//         CPU) / BLOCKED into an mmapable array map (layout:
//         core/oncpu_map.h). A reader maps it PROT_READ once and then asks
//         with two plain loads (header, then the thread's byte): no system
//         call. A thread not switched since the program started, or beyond
//         the map (pid_max raised later), reads UNKNOWN and falls back to
//         the rseq estimate; so does every thread once the loader stops.
//   rseq  no privilege: a thread sleeping inside lockswap (ThreadSlot::
//         blocked) or last seen on the spinner's own CPU (its rseq cpu_id)
//         is not running; plus a need_resched() stand-in: a spinner whose
//         own clock jumps by more than kPreemptedGapNs between two polls was
//         itself preempted, i.e. the CPU is wanted by someone else, and
//         stops spinning.
//   off   the rseq estimate without the preemption detector (the
//         behaviour before LOCKSWAP_ONCPU existed).
//   auto  (default) bpf when a live map was handed over, else rseq.
//
// Handing the map over: `lockswap-oncpu start` (root: CAP_BPF + CAP_PERFMON)
// loads the program, marks the map live, FREEZES it and pins map and link
// under /sys/fs/bpf/lockswap/ (directory and pins mode 0700/0600, bpffs
// mounted mode 0700 if absent). `lockswap-oncpu exec -- CMD` (root) opens the
// pin and runs CMD with the descriptor inherited, its number in
// LOCKSWAP_ONCPU_FD; CMD may drop privileges first or be any unprivileged
// program; its children inherit descriptor and variable across fork/exec.
// The library validates the descriptor from /proc/self/fdinfo (array map,
// 4-byte key, 8-byte value, BPF_F_MMAPABLE) and the header magic, and
// refuses when the process sits in a nested PID namespace (the map is
// indexed by host tids, gettid() there is not). The descriptor is mapped
// with a plain mmap(): unprivileged readers never call bpf(), which
// kernel.unprivileged_bpf_disabled forbids them anyway.
//
// Security argument:
//   * Who can load: only CAP_BPF + CAP_PERFMON (root) — program load, attach,
//     pinning and BPF_OBJ_GET on the pins (0600 in a 0700 directory) all
//     need them; the library never loads anything.
//   * Who can read: exactly the processes given the descriptor by a
//     privileged `lockswap-oncpu exec`, and their descendants (or anyone
//     they pass it to). Nothing is world-readable on the file system.
//   * What leaks: for every thread of the machine (all users), whether it is
//     running, runnable or blocked right now — what /proc/<pid>/task/*/stat
//     shows every user by default, but observable at memory speed instead of
//     by polling files, and unaffected by hidepid=. Nothing else: no
//     addresses, names, CPU numbers or kernel pointers.
//   * What cannot be written: the map is frozen, so through the descriptor a
//     syscall update fails (EPERM), a writable mmap() fails (EPERM) and a
//     read mapping cannot be mprotect()ed writable (VM_MAYWRITE is cleared);
//     measured here on Linux 6.18 as uid nobody. The descriptor is O_RDWR
//     only because the kernel cannot mmap a map through a read-only file
//     (the mapping would lose VM_SHARED). Only eBPF programs write the map;
//     where unprivileged eBPF is enabled (unprivileged_bpf_disabled = 0) a
//     holder could load a socket filter that writes it, which misleads only
//     the spinning heuristics of lockswap processes (spin longer or queue
//     sooner): owner_on_cpu() is a hint, never a correctness condition.
//   * The eBPF program only reads task pids and states and writes its own
//     map; its licence string is GPL because bpf_probe_read_kernel() is.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/oncpu_map.h"

namespace lockswap::oncpu {

enum class Source : uint8_t { off, rseq, bpf };

enum class State : uint8_t {
  unknown = ONCPU_UNKNOWN,
  running = ONCPU_RUNNING,
  preempted = ONCPU_PREEMPTED,
  blocked = ONCPU_BLOCKED,
};

// A spinner whose clock advanced this much between two polls (16 relaxes,
// about a microsecond) was preempted meanwhile: rseq's need_resched().
inline constexpr uint64_t kPreemptedGapNs = 50'000;

struct MapView {
  const volatile uint8_t* bytes = nullptr;  // the mapping, nullptr when none
  uint64_t tids = 0;                         // thread ids it covers
};

// Set once before the first lock slow path (preload) or by a test.
inline Source g_source = Source::off;
inline MapView g_map;

// Maps the descriptor read-only after checking it is our map. Returns
// nullptr on success, else why not (a constant string, for error messages).
const char* attach(int fd);
// Why the current process cannot use the map at all, or nullptr.
const char* unusable_here();

inline Source source() { return g_source; }
inline const char* source_name(Source s) {
  return s == Source::bpf ? "bpf" : s == Source::rseq ? "rseq" : "off";
}

inline bool map_live() {
  const volatile uint8_t* m = g_map.bytes;
  return m != nullptr && *reinterpret_cast<const volatile uint64_t*>(m) == ONCPU_MAP_LIVE;
}

// Two plain loads; UNKNOWN without a live map or for a tid it does not cover.
inline State state_of(int32_t tid) {
  if (tid <= 0 || static_cast<uint64_t>(tid) >= g_map.tids || !map_live()) return State::unknown;
  return static_cast<State>(g_map.bytes[ONCPU_MAP_HEADER_BYTES + static_cast<std::size_t>(tid)]);
}

// need_resched() stand-in for the rseq source: true when the gap between
// two clock readings of one spin loop says the spinner itself was preempted.
inline bool spinner_was_preempted(uint64_t previous_ns, uint64_t now_ns) {
  return g_source == Source::rseq && previous_ns != 0 && now_ns - previous_ns > kPreemptedGapNs;
}

}  // namespace lockswap::oncpu
