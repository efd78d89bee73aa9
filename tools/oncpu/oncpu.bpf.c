// tools/oncpu/oncpu.bpf.c — the one sched_switch program of the machine:
// records, per host thread id, whether that thread is on a CPU right now
// (layout: core/oncpu_map.h; design and security: core/oncpu.h).
//
// CO-RE without vmlinux.h: the two task_struct fields used are declared here
// with preserve_access_index, so the build needs no kernel BTF; libbpf
// relocates them against /sys/kernel/btf/vmlinux when the loader runs.
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "core/oncpu_map.h"

struct task_struct {
  int pid;
  unsigned int __state;  // Linux >= 5.14
} __attribute__((preserve_access_index));

struct task_struct___pre514 {
  long state;
} __attribute__((preserve_access_index));

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, __u64);  // ONCPU_MAP_VALUE_SIZE bytes, written byte-wise
  __uint(max_entries, 1);  // set by the loader from pid_max
} lockswap_oncpu SEC(".maps");

static __always_inline void set_state(int tid, __u8 state) {
  if (tid <= 0) return;  // the per-CPU idle tasks are all pid 0
  __u32 key = 1 + (__u32)tid / ONCPU_TIDS_PER_ENTRY;
  __u8* v = bpf_map_lookup_elem(&lockswap_oncpu, &key);
  if (v) v[(__u32)tid % ONCPU_TIDS_PER_ENTRY] = state;
}

// TASK_RUNNING is 0 in every kernel: a task switched out while still
// runnable (preempted, or sched_yield()) is waiting for a CPU.
static __always_inline __u8 prev_state(int preempt, struct task_struct* prev) {
  if (preempt) return ONCPU_PREEMPTED;
  long state;
  if (bpf_core_field_exists(prev->__state))
    state = BPF_CORE_READ(prev, __state);
  else
    state = BPF_CORE_READ((struct task_struct___pre514*)prev, state);
  return state == 0 ? ONCPU_PREEMPTED : ONCPU_BLOCKED;
}

// raw tracepoint sched_switch(bool preempt, struct task_struct* prev,
// struct task_struct* next, ...): raw_tp rather than tp_btf, which older
// kernels and some configurations refuse.
SEC("raw_tp/sched_switch")
int lockswap_sched_switch(unsigned long long* ctx) {
  struct task_struct* prev = (struct task_struct*)ctx[1];
  struct task_struct* next = (struct task_struct*)ctx[2];
  set_state(BPF_CORE_READ(prev, pid), prev_state((int)ctx[0], prev));
  set_state(BPF_CORE_READ(next, pid), ONCPU_RUNNING);
  return 0;
}

// Not attached: the loader runs it with BPF_PROG_TEST_RUN to write the
// header, ctx[0] = the new value. The map is frozen (read-only from the
// syscall side, so that a reader's descriptor can write nothing), and
// programs are what may still write it.
SEC("raw_tp")
int lockswap_oncpu_set_header(unsigned long long* ctx) {
  __u32 key = 0;
  __u64* h = bpf_map_lookup_elem(&lockswap_oncpu, &key);
  if (h) *h = ctx[0];
  return 0;
}

// bpf_probe_read_kernel() (behind BPF_CORE_READ) is GPL-only in the kernel;
// this licence covers the eBPF program only.
char LICENSE[] SEC("license") = "GPL";
