// core/cid/rseq.cpp — LOCKSWAP_CID=rseq: the kernel's own mm_cid (design:
// core/cid.h, "rseq").
//
// The kernel allocates; rseq_current() (core/cid.h) reads the id from the
// rseq area glibc registered, inline. What is left out of line is the
// choice select() makes: where the kernel or libc provides no mm_cid, the
// process runs percpu instead.
#include "arch/rseq.h"
#include "core/cid.h"
#include "core/cid/internal.h"

namespace lockswap {
namespace cid {
namespace {
bool g_rseq_fell_back = false;
}  // namespace

CidMode rseq_or_percpu(CidMode requested) {
  g_rseq_fell_back = requested == CidMode::rseq && !arch::kernel_mm_cid_available();
  return g_rseq_fell_back ? CidMode::percpu : requested;
}

bool rseq_fell_back() { return g_rseq_fell_back; }

}  // namespace cid
}  // namespace lockswap
