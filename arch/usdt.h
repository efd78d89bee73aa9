// arch/usdt.h — USDT probes (provider `lockswap`) on the contended paths.
//
// With <sys/sdt.h> (Debian: systemtap-sdt-dev) each probe is one `nop` plus a
// note in .note.stapsdt that bpftrace, perf and SystemTap attach to; no
// tracer attached, nothing runs. The probes sit only on paths that are
// already slow (a failed fast path, a futex system call), never on an
// uncontended lock or unlock. Without the header (CMake says so when it
// configures) the macros expand to nothing.
//
//   probe            | arguments                        | fires
//   -----------------+----------------------------------+---------------------------------
//   acquire_begin    | lock address, op                 | a native variant enters its slow path
//   acquire_end      | lock address, op, result (errno) | ... and leaves it (0 = acquired)
//   sleep            | futex word, expected value       | before every futex sleep (WaitCtx)
//   wake             | futex word, threads to wake      | before every futex wake system call
//   handoff          | lock address, op                 | an rwsem waiter claims a handoff
//
// op: what kind of acquisition; the codes are core's (core/trace.h).
// Example: bpftrace -e 'usdt:/path/liblockswap.so:lockswap:acquire_end { @[arg1] = count(); }'
#pragma once

#ifndef LOCKSWAP_HAVE_SDT
#define LOCKSWAP_HAVE_SDT 0
#endif

#if LOCKSWAP_HAVE_SDT
#include <sys/sdt.h>
#define LOCKSWAP_TRACE_ACQUIRE_BEGIN(lock, op) DTRACE_PROBE2(lockswap, acquire_begin, (const void*)(lock), (int)(op))
#define LOCKSWAP_TRACE_ACQUIRE_END(lock, op, rc) \
  DTRACE_PROBE3(lockswap, acquire_end, (const void*)(lock), (int)(op), (int)(rc))
#define LOCKSWAP_TRACE_SLEEP(word, expected) DTRACE_PROBE2(lockswap, sleep, (const void*)(word), (unsigned)(expected))
#define LOCKSWAP_TRACE_WAKE(word, count) DTRACE_PROBE2(lockswap, wake, (const void*)(word), (int)(count))
#define LOCKSWAP_TRACE_HANDOFF(lock, op) DTRACE_PROBE2(lockswap, handoff, (const void*)(lock), (int)(op))
#else
#define LOCKSWAP_TRACE_ACQUIRE_BEGIN(lock, op) ((void)0)
#define LOCKSWAP_TRACE_ACQUIRE_END(lock, op, rc) ((void)0)
#define LOCKSWAP_TRACE_SLEEP(word, expected) ((void)0)
#define LOCKSWAP_TRACE_WAKE(word, count) ((void)0)
#define LOCKSWAP_TRACE_HANDOFF(lock, op) ((void)0)
#endif
