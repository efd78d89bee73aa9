// preload/cli/oncpu/lockswap-oncpu.c — the privileged loader of the owner-on-CPU
// map (design and security argument: core/oncpu.h; layout: core/oncpu_map.h).
//
//   lockswap-oncpu start            load + attach the sched_switch program,
//                                   pin program link and map under
//                                   /sys/fs/bpf/lockswap/ (mounts bpffs there
//                                   if nothing is mounted); idempotent
//   lockswap-oncpu stop             mark the map not live, unpin both
//   lockswap-oncpu status           exit 0 running, 3 stopped
//   lockswap-oncpu exec -- CMD...   run CMD with a READ-ONLY descriptor of the
//                                   map inherited as LOCKSWAP_ONCPU_FD
//
// Needs CAP_BPF + CAP_PERFMON (or root) for start, stop and exec; the command
// run by `exec` needs nothing: the library only mmaps the descriptor.
#include <errno.h>
#include <fcntl.h>
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

static int is_running(void) { return access(ONCPU_PIN_LINK, F_OK) == 0 && access(ONCPU_PIN_MAP, F_OK) == 0; }

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
  if (bpf_map__pin(skel->maps.lockswap_oncpu, ONCPU_PIN_MAP) != 0) return fail("pin the map at " ONCPU_PIN_MAP);
  if (bpf_link__pin(skel->links.lockswap_sched_switch, ONCPU_PIN_LINK) != 0) {
    fail("pin the link at " ONCPU_PIN_LINK);
    unlink(ONCPU_PIN_MAP);
    return 1;
  }
  return 0;
}

static int cmd_start(void) {
  if (ensure_bpffs() != 0) return 1;
  if (is_running()) {
    printf("%s: already running (%s)\n", prog_name, ONCPU_PIN_DIR);
    return 0;
  }
  long pid_max = read_pid_max();
  if (pid_max <= 0) return fail("read /proc/sys/kernel/pid_max");
  if (mkdir(ONCPU_PIN_DIR, 0700) != 0 && errno != EEXIST) return fail("mkdir " ONCPU_PIN_DIR);
  struct oncpu_bpf* skel = oncpu_bpf__open();
  if (skel == NULL) return fail("open the eBPF object");
  __u32 entries = 1 + (__u32)((pid_max + ONCPU_TIDS_PER_ENTRY - 1) / ONCPU_TIDS_PER_ENTRY);
  int rc = load_and_pin(skel, entries);
  if (rc == 0)
    printf("%s: started: %u thread ids (pid_max %ld), pinned under %s\n", prog_name,
           (entries - 1) * ONCPU_TIDS_PER_ENTRY, pid_max, ONCPU_PIN_DIR);
  oncpu_bpf__destroy(skel);  // the pins keep program, link and map alive
  return rc;
}

// Mark the pinned map stopped: readers keep their mappings after the pins
// are gone, and must learn that nobody updates the map any more. A second
// instance of the object reuses the pinned map, for its setter program.
static int mark_stopped(void) {
  int map_fd = bpf_obj_get(ONCPU_PIN_MAP);
  if (map_fd < 0) return fail("open " ONCPU_PIN_MAP);
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
  close(map_fd);
  return rc;
}

static int cmd_stop(void) {
  if (!is_running()) {
    printf("%s: not running\n", prog_name);
    return 0;
  }
  if (mark_stopped() != 0) return 1;
  if (unlink(ONCPU_PIN_LINK) != 0) return fail("unpin " ONCPU_PIN_LINK);
  if (unlink(ONCPU_PIN_MAP) != 0) return fail("unpin " ONCPU_PIN_MAP);
  rmdir(ONCPU_PIN_DIR);
  printf("%s: stopped\n", prog_name);
  return 0;
}

// The descriptor handed to unprivileged readers. Not BPF_F_RDONLY: the
// kernel mmaps a map only through a writable file (a read-only file loses
// VM_SHARED, and bpf_map_mmap() refuses that). The map is frozen instead,
// so through this descriptor the syscall side can write nothing, a writable
// mmap() fails and a PROT_READ mapping cannot be mprotect()ed writable
// (security argument: core/oncpu.h).
static int open_for_reader(void) { return bpf_obj_get(ONCPU_PIN_MAP); }

static int cmd_status(void) {
  if (!is_running()) {
    printf("%s: stopped\n", prog_name);
    return EXIT_STOPPED;
  }
  int fd = open_for_reader();
  if (fd < 0) return fail("open " ONCPU_PIN_MAP);
  struct bpf_map_info info;
  __u32 len = sizeof info;
  memset(&info, 0, sizeof info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return fail("map info");
  size_t bytes = (size_t)info.max_entries * ONCPU_MAP_VALUE_SIZE;
  const volatile unsigned char* m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return fail("mmap the map");
  __u64 header = *(const volatile __u64*)m;
  unsigned char self = m[ONCPU_MAP_HEADER_BYTES + (size_t)getpid()];
  printf("%s: running: map id %u, %u thread ids, header %s, this process reads %s\n", prog_name, info.id,
         (info.max_entries - 1) * ONCPU_TIDS_PER_ENTRY, header == ONCPU_MAP_LIVE ? "live" : "NOT live",
         self == ONCPU_RUNNING ? "on CPU" : "NOT on CPU");
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
          "usage: %s start|stop|status\n"
          "       %s exec [--] COMMAND [ARGS...]\n"
          "Loads (start) one sched_switch eBPF program for the whole machine that records\n"
          "which threads are on a CPU, pinned under %s; `exec` runs COMMAND with\n"
          "a read-only descriptor of its map in %s (LOCKSWAP_ONCPU=auto|bpf reads it).\n",
          prog_name, prog_name, ONCPU_PIN_DIR, ONCPU_FD_ENV);
  return rc;
}

int main(int argc, char** argv) {
  libbpf_set_print(libbpf_quiet);
  if (argc < 2) return usage(stderr, 2);
  const char* cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) return usage(stdout, 0);
  if (strcmp(cmd, "start") == 0 && argc == 2) return cmd_start();
  if (strcmp(cmd, "stop") == 0 && argc == 2) return cmd_stop();
  if (strcmp(cmd, "status") == 0 && argc == 2) return cmd_status();
  if (strcmp(cmd, "exec") == 0) {
    int first = 2;
    if (first < argc && strcmp(argv[first], "--") == 0) ++first;
    if (first >= argc) return usage(stderr, 2);
    return cmd_exec(argv + first);
  }
  return usage(stderr, 2);
}
