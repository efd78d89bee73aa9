// tools/oncpu/lockswap-oncpu.c — the privileged loader of the owner-on-CPU
// map (design and security argument: core/oncpu.h; layout: core/oncpu_map.h).
//
//   lockswap-oncpu start            load + attach the sched_switch program,
//                                   pin program link and map under
//                                   /sys/fs/bpf/lockswap/ (mounts bpffs there
//                                   if nothing is mounted); idempotent
//   lockswap-oncpu stop             mark the map not live, unpin both
//   lockswap-oncpu status [TID]     exit 0 running, 3 stopped; the state of
//                                   thread TID (default: this process)
//   lockswap-oncpu exec -- CMD...   run CMD with a READ-ONLY descriptor of the
//                                   map inherited as LOCKSWAP_ONCPU_FD
//   --pin-dir DIR (before the command) pins under DIR instead: a second,
//   independent instance, which the tests use so as not to disturb the
//   machine's own.
//
// Needs CAP_BPF + CAP_PERFMON (or root) for start, stop and exec; the command
// run by `exec` needs nothing: the library only mmaps the descriptor.
//
// Design of the pins:
//   * The pin directory is trusted only when it is a real directory (not a
//     symbolic link) owned by root (or by the loader's own user) and not
//     writable by group or others; anything else is refused, never used or
//     repaired: whoever could write there could have planted a map of their
//     own (writable, never frozen), and `exec` would hand it to every reader.
//   * Half-pinned states (a start that died between the two pins, or a pin
//     removed by hand) are recovered: `stop` marks whatever map it can still
//     reach (through the map pin, else through the link's program) not live
//     and removes the pins that exist; `start` does the same first, then pins
//     afresh; `status` names the state and exits 3.
//   * `status` reads the map only within its size: pid_max may have grown
//     since `start`, and a thread id beyond the map is reported as such
//     (the library does the same: a tid beyond the map reads unknown).
// Argued rather than tested: a pin directory whose owner or mode changes
// after the check (only root can do that to a root-owned, 0700 directory on
// a bpffs mounted mode 0700, and root needs no race to plant a map).
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "core/oncpu_map.h"
#include "oncpu.skel.h"

#define BPF_FS_MAGIC_VALUE 0xcafe4a11
#define EXIT_STOPPED 3

static const char* prog_name = "lockswap-oncpu";

// The pins: ONCPU_PIN_DIR unless --pin-dir.
static const char* pin_dir = ONCPU_PIN_DIR;
static char pin_map[PATH_MAX];
static char pin_link[PATH_MAX];

static int fail(const char* what) {
  fprintf(stderr, "%s: %s: %s\n", prog_name, what, strerror(errno));
  return 1;
}

static int libbpf_quiet(enum libbpf_print_level level, const char* fmt, va_list ap) {
  if (level != LIBBPF_WARN) return 0;
  return vfprintf(stderr, fmt, ap);
}

// The pins need a bpf filesystem at /sys/fs/bpf; mount one (root-only
// mode) when the directory is still the plain sysfs mount point.
static int ensure_bpffs(void) {
  struct statfs sfs;
  if (statfs("/sys/fs/bpf", &sfs) != 0) return fail("statfs /sys/fs/bpf");
  if ((unsigned long)sfs.f_type == BPF_FS_MAGIC_VALUE) return 0;
  if (mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700") != 0) return fail("mount bpffs on /sys/fs/bpf");
  return 0;
}

static long read_pid_max(void) {
  FILE* f = fopen("/proc/sys/kernel/pid_max", "r");
  long v = 0;
  if (f == NULL) return -1;
  if (fscanf(f, "%ld", &v) != 1) v = -1;
  fclose(f);
  return v;
}

// The map is frozen, so the header is written by the (never attached)
// setter program, run once with BPF_PROG_TEST_RUN.
static int set_header(struct oncpu_bpf* skel, __u64 value) {
  __u64 args[1] = {value};
  LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = args, .ctx_size_in = sizeof args);
  return bpf_prog_test_run_opts(bpf_program__fd(skel->progs.lockswap_oncpu_set_header), &run);
}

static bool exists(const char* path) { return access(path, F_OK) == 0; }
static bool is_running(void) { return exists(pin_link) && exists(pin_map); }
static bool is_half_pinned(void) { return exists(pin_link) != exists(pin_map); }

static int set_pin_dir(const char* dir) {
  size_t len = strlen(dir);
  if (len == 0 || dir[0] != '/') {
    fprintf(stderr, "%s: --pin-dir must be an absolute path\n", prog_name);
    return 2;
  }
  if (snprintf(pin_map, sizeof pin_map, "%s/oncpu_map", dir) >= (int)sizeof pin_map ||
      snprintf(pin_link, sizeof pin_link, "%s/oncpu_link", dir) >= (int)sizeof pin_link) {
    fprintf(stderr, "%s: --pin-dir too long\n", prog_name);
    return 2;
  }
  pin_dir = dir;
  return 0;
}

// Refuse a pin directory anyone but root (or this user) could have written
// to (design above). A missing one is fine: start creates it 0700.
static int check_pin_dir(void) {
  struct stat st;
  if (lstat(pin_dir, &st) != 0) return errno == ENOENT ? 0 : fail(pin_dir);
  const char* why = NULL;
  if (!S_ISDIR(st.st_mode))
    why = S_ISLNK(st.st_mode) ? "is a symbolic link" : "is not a directory";
  else if (st.st_uid != 0 && st.st_uid != geteuid())
    why = "is not owned by root";
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    why = "is writable by group or others";
  if (why == NULL) return 0;
  fprintf(stderr, "%s: refusing the pin directory %s: it %s (owner uid %u, mode %04o); remove it or fix it as root\n",
          prog_name, pin_dir, why, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
  return 1;
}

// Load, attach, mark live, freeze, pin. Returns 0 or 1 (message printed).
static int load_and_pin(struct oncpu_bpf* skel, __u32 entries) {
  if (bpf_map__set_max_entries(skel->maps.lockswap_oncpu, entries) != 0) return fail("size the map");
  if (oncpu_bpf__load(skel) != 0) return fail("load the eBPF program (needs CAP_BPF and CAP_PERFMON, and kernel BTF)");
  skel->links.lockswap_sched_switch = bpf_program__attach(skel->progs.lockswap_sched_switch);
  if (skel->links.lockswap_sched_switch == NULL) return fail("attach to raw tracepoint sched_switch");
  int map_fd = bpf_map__fd(skel->maps.lockswap_oncpu);
  if (set_header(skel, ONCPU_MAP_LIVE) != 0) return fail("mark the map live");
  if (bpf_map_freeze(map_fd) != 0) return fail("freeze the map");
  // Pin the map first: a link pinned without its map could be neither read
  // nor stopped cleanly.
  if (bpf_map__pin(skel->maps.lockswap_oncpu, pin_map) != 0) return fail(pin_map);
  if (bpf_link__pin(skel->links.lockswap_sched_switch, pin_link) != 0) {
    fail(pin_link);
    unlink(pin_map);
    return 1;
  }
  return 0;
}

// An array map of 8-byte values, mmapable: the owner-on-CPU map's shape.
static bool is_oncpu_map(int fd) {
  struct bpf_map_info info;
  __u32 len = sizeof info;
  memset(&info, 0, sizeof info);
  return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.type == BPF_MAP_TYPE_ARRAY &&
         info.value_size == ONCPU_MAP_VALUE_SIZE && (info.map_flags & BPF_F_MMAPABLE) && info.max_entries >= 1;
}

// The map behind the pins: its own pin, else the one the pinned link's
// program uses (a half-pinned state that lost the map pin). -1 if neither.
static int reachable_map_fd(void) {
  int fd = bpf_obj_get(pin_map);
  if (fd >= 0) return fd;
  int link_fd = bpf_obj_get(pin_link);
  if (link_fd < 0) return -1;
  struct bpf_link_info link;
  __u32 len = sizeof link;
  memset(&link, 0, sizeof link);
  int prog_fd = bpf_obj_get_info_by_fd(link_fd, &link, &len) == 0 ? bpf_prog_get_fd_by_id(link.prog_id) : -1;
  close(link_fd);
  if (prog_fd < 0) return -1;
  __u32 map_ids[4] = {0};
  struct bpf_prog_info prog;
  len = sizeof prog;
  memset(&prog, 0, sizeof prog);
  prog.nr_map_ids = 4;
  prog.map_ids = (__u64)(unsigned long)map_ids;
  if (bpf_obj_get_info_by_fd(prog_fd, &prog, &len) != 0) prog.nr_map_ids = 0;
  close(prog_fd);
  for (__u32 i = 0; i < prog.nr_map_ids && i < 4; ++i) {
    fd = bpf_map_get_fd_by_id(map_ids[i]);
    if (fd >= 0 && is_oncpu_map(fd)) return fd;
    if (fd >= 0) close(fd);
  }
  return -1;
}

// Mark the map not live: readers keep their mappings after the pins are
// gone, and must learn that nobody updates the map any more. A second
// instance of the object reuses the map, for its setter program.
static int mark_stopped(int map_fd) {
  struct oncpu_bpf* skel = oncpu_bpf__open();
  int rc = 1;
  if (skel == NULL) {
    fail("open the eBPF object");
  } else if (bpf_map__reuse_fd(skel->maps.lockswap_oncpu, map_fd) != 0 ||
             bpf_program__set_autoload(skel->progs.lockswap_sched_switch, false) != 0 || oncpu_bpf__load(skel) != 0) {
    fail("load the header setter");
  } else if (set_header(skel, 0) != 0) {
    fail("mark the map stopped");
  } else {
    rc = 0;
  }
  oncpu_bpf__destroy(skel);
  return rc;
}

// Take down whatever of an instance exists (both pins, or one of them):
// first the map is marked not live, then the link (the program detaches)
// and the map are unpinned. 0 when nothing is left.
static int unpin_all(void) {
  int map_fd = reachable_map_fd();
  if (map_fd >= 0) {
    int rc = mark_stopped(map_fd);
    close(map_fd);
    if (rc != 0) return rc;
  } else {
    fprintf(stderr, "%s: warning: no map reachable to mark stopped\n", prog_name);
  }
  if (unlink(pin_link) != 0 && errno != ENOENT) return fail(pin_link);
  if (unlink(pin_map) != 0 && errno != ENOENT) return fail(pin_map);
  rmdir(pin_dir);
  return 0;
}

static int cmd_start(void) {
  if (ensure_bpffs() != 0 || check_pin_dir() != 0) return 1;
  if (is_running()) {
    printf("%s: already running (%s)\n", prog_name, pin_dir);
    return 0;
  }
  if (is_half_pinned()) {
    printf("%s: recovering a half-pinned state under %s (only %s): cleaning up first\n", prog_name, pin_dir,
           exists(pin_map) ? "the map" : "the link");
    if (unpin_all() != 0) return 1;
  }
  long pid_max = read_pid_max();
  if (pid_max <= 0) return fail("read /proc/sys/kernel/pid_max");
  if (mkdir(pin_dir, 0700) != 0 && errno != EEXIST) return fail(pin_dir);
  if (check_pin_dir() != 0) return 1;  // it existed (EEXIST) or was created just now by someone else
  struct oncpu_bpf* skel = oncpu_bpf__open();
  if (skel == NULL) return fail("open the eBPF object");
  __u32 entries = 1 + (__u32)((pid_max + ONCPU_TIDS_PER_ENTRY - 1) / ONCPU_TIDS_PER_ENTRY);
  int rc = load_and_pin(skel, entries);
  if (rc == 0)
    printf("%s: started: %u thread ids (pid_max %ld), pinned under %s\n", prog_name,
           (entries - 1) * ONCPU_TIDS_PER_ENTRY, pid_max, pin_dir);
  oncpu_bpf__destroy(skel);  // the pins keep program, link and map alive
  return rc;
}

static int cmd_stop(void) {
  if (check_pin_dir() != 0) return 1;
  if (!exists(pin_link) && !exists(pin_map)) {
    printf("%s: not running\n", prog_name);
    return 0;
  }
  if (unpin_all() != 0) return 1;
  printf("%s: stopped\n", prog_name);
  return 0;
}

// The descriptor handed to unprivileged readers. Not BPF_F_RDONLY: the
// kernel mmaps a map only through a writable file (a read-only file loses
// VM_SHARED, and bpf_map_mmap() refuses that). The map is frozen instead,
// so through this descriptor the syscall side can write nothing, a writable
// mmap() fails and a PROT_READ mapping cannot be mprotect()ed writable
// (security argument: core/oncpu.h).
static int open_for_reader(void) {
  if (check_pin_dir() != 0) {
    errno = EPERM;
    return -1;
  }
  return bpf_obj_get(pin_map);
}

static const char* state_name(unsigned char state) {
  switch (state) {
    case ONCPU_RUNNING: return "on CPU";
    case ONCPU_PREEMPTED: return "preempted (runnable, off CPU)";
    case ONCPU_BLOCKED: return "blocked";
    default: return "unknown (not switched since start)";
  }
}

static int cmd_status(long tid) {
  if (check_pin_dir() != 0) return 1;
  if (is_half_pinned()) {
    printf("%s: half-pinned under %s (only %s): run start or stop to recover\n", prog_name, pin_dir,
           exists(pin_map) ? "the map" : "the link");
    return EXIT_STOPPED;
  }
  if (!is_running()) {
    printf("%s: stopped\n", prog_name);
    return EXIT_STOPPED;
  }
  int fd = open_for_reader();
  if (fd < 0) return fail(pin_map);
  struct bpf_map_info info;
  __u32 len = sizeof info;
  memset(&info, 0, sizeof info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return fail("map info");
  size_t bytes = (size_t)info.max_entries * ONCPU_MAP_VALUE_SIZE;
  if (!is_oncpu_map(fd)) {
    fprintf(stderr, "%s: %s is not lockswap's owner-on-CPU map\n", prog_name, pin_map);
    return 1;
  }
  const volatile unsigned char* m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return fail("mmap the map");
  __u64 header = *(const volatile __u64*)m;
  size_t tids = (size_t)(info.max_entries - 1) * ONCPU_TIDS_PER_ENTRY;
  char state[96];
  // pid_max may have grown since start: a tid beyond the map is not in it.
  if (tid >= 0 && (size_t)tid < tids)
    snprintf(state, sizeof state, "%s", state_name(m[ONCPU_MAP_HEADER_BYTES + (size_t)tid]));
  else
    snprintf(state, sizeof state, "beyond the map (pid_max grew since start): unknown");
  char who[48];
  if (tid == (long)getpid())
    snprintf(who, sizeof who, "this process");
  else
    snprintf(who, sizeof who, "thread %ld", tid);
  printf("%s: running: map id %u, %zu thread ids, header %s, %s reads %s\n", prog_name, info.id, tids,
         header == ONCPU_MAP_LIVE ? "live" : "NOT live", who, state);
  return header == ONCPU_MAP_LIVE ? 0 : EXIT_STOPPED;
}

static int cmd_exec(char** argv) {
  int fd = open_for_reader();
  if (fd < 0) {
    fprintf(stderr, "%s: the map is not available (%s): run '%s start' first, as root\n", prog_name,
            strerror(errno), prog_name);
    return 2;
  }
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) return fail("clear close-on-exec");
  char num[16];
  snprintf(num, sizeof num, "%d", fd);
  if (setenv(ONCPU_FD_ENV, num, 1) != 0) return fail("setenv");
  execvp(argv[0], argv);
  fprintf(stderr, "%s: %s: %s\n", prog_name, argv[0], strerror(errno));
  return 127;
}

static int usage(FILE* out, int rc) {
  fprintf(out,
          "usage: %s [--pin-dir DIR] start|stop\n"
          "       %s [--pin-dir DIR] status [TID]\n"
          "       %s [--pin-dir DIR] exec [--] COMMAND [ARGS...]\n"
          "Loads (start) one sched_switch eBPF program for the whole machine that records\n"
          "which threads are on a CPU, pinned under %s (or DIR: a directory owned\n"
          "by root, not writable by group or others); `exec` runs COMMAND with a read-only\n"
          "descriptor of its map in %s (LOCKSWAP_ONCPU=auto|bpf reads it).\n",
          prog_name, prog_name, prog_name, ONCPU_PIN_DIR, ONCPU_FD_ENV);
  return rc;
}

static int parse_tid(const char* text, long* tid) {
  char* end = NULL;
  errno = 0;
  *tid = strtol(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && *tid >= 0 ? 0 : -1;
}

int main(int argc, char** argv) {
  libbpf_set_print(libbpf_quiet);
  int first = 1;
  if (first + 1 < argc && strcmp(argv[first], "--pin-dir") == 0) {
    int rc = set_pin_dir(argv[first + 1]);
    if (rc != 0) return rc;
    first += 2;
  } else {
    set_pin_dir(ONCPU_PIN_DIR);
  }
  if (first >= argc) return usage(stderr, 2);
  const char* cmd = argv[first];
  int rest = argc - first - 1;
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) return usage(stdout, 0);
  if (strcmp(cmd, "start") == 0 && rest == 0) return cmd_start();
  if (strcmp(cmd, "stop") == 0 && rest == 0) return cmd_stop();
  if (strcmp(cmd, "status") == 0 && rest <= 1) {
    long tid = getpid();
    if (rest == 1 && parse_tid(argv[first + 1], &tid) != 0) return usage(stderr, 2);
    return cmd_status(tid);
  }
  if (strcmp(cmd, "exec") == 0) {
    int at = first + 1;
    if (at < argc && strcmp(argv[at], "--") == 0) ++at;
    if (at >= argc) return usage(stderr, 2);
    return cmd_exec(argv + at);
  }
  return usage(stderr, 2);
}
