/* tests/lwlock/seccomp_mdwe.c PROGRAM [ARGS...] — runs PROGRAM under the
 * seccomp filter a systemd unit with MemoryDenyWriteExecute=yes installs
 * on kernels without prctl(PR_SET_MDWE): mmap and mprotect fail with EPERM
 * when they would map memory writable and executable at once, and
 * mprotect (and pkey_mprotect) fail whenever they ask for PROT_EXEC.
 * Exit 9 when the filter cannot be installed (the caller skips). */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_pkey_mprotect
#define __NR_pkey_mprotect -1
#endif

#define ARG2_LOW offsetof(struct seccomp_data, args[2])
#define DENY (SECCOMP_RET_ERRNO | EPERM)

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 0, 3),
      /* mmap: deny PROT_WRITE and PROT_EXEC together */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG2_LOW),
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, PROT_WRITE | PROT_EXEC),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_WRITE | PROT_EXEC, 4, 5),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)__NR_pkey_mprotect, 0, 3),
      /* mprotect, pkey_mprotect: deny PROT_EXEC */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG2_LOW),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, DENY),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    perror("seccomp_mdwe: cannot install the filter");
    return 9;
  }
  execv(argv[1], argv + 1);
  perror("seccomp_mdwe: execv");
  return 9;
}
