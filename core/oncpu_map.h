/* core/oncpu_map.h — layout of the owner-on-CPU map (C and C++, and the eBPF
 * program tools/oncpu/oncpu.bpf.c).
 *
 * One BPF_MAP_TYPE_ARRAY with BPF_F_MMAPABLE, key u32, value 8 bytes, so the
 * mapping is a flat byte array (an mmapable array's elements are contiguous,
 * value_size rounded up to 8):
 *
 *   bytes 0-7       header: ONCPU_MAP_LIVE while the loader's program is
 *                   attached; the loader clears it before detaching, so a
 *                   reader never trusts a map that stopped being updated
 *   byte 8 + tid    state of host thread id `tid` (ONCPU_*), 0 = unknown
 *
 * Element k >= 1 holds tids 8(k-1) .. 8(k-1)+7; max_entries is
 * 1 + ceil(pid_max / 8) at load time (4 MiB of kernel memory for the largest
 * pid_max, 4,194,304). A tid beyond the map reads as unknown.
 */
#ifndef LOCKSWAP_CORE_ONCPU_MAP_H
#define LOCKSWAP_CORE_ONCPU_MAP_H

#define ONCPU_MAP_VALUE_SIZE 8
#define ONCPU_MAP_HEADER_BYTES 8
#define ONCPU_TIDS_PER_ENTRY 8
/* "lsoncpu" + layout version 1, little-endian u64 */
#define ONCPU_MAP_LIVE 0x0175706e6f63736cULL

/* Per-thread states written at every sched_switch. */
#define ONCPU_UNKNOWN 0   /* not switched since the program was attached */
#define ONCPU_RUNNING 1   /* on a CPU now */
#define ONCPU_PREEMPTED 2 /* off CPU but runnable: waiting for a CPU */
#define ONCPU_BLOCKED 3   /* off CPU, not runnable (sleeping, stopped, exited) */

#define ONCPU_PIN_DIR "/sys/fs/bpf/lockswap"
#define ONCPU_PIN_MAP ONCPU_PIN_DIR "/oncpu_map"
#define ONCPU_PIN_LINK ONCPU_PIN_DIR "/oncpu_link"
#define ONCPU_FD_ENV "LOCKSWAP_ONCPU_FD"

#endif
