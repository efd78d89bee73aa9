"""tests/attribute/classify_test.py — the unprivileged half of `lockswap attribute`: the
classification of futex waits by their frames, the parsing of bpftrace's map output, the PLT
import names, the record encoding and the 77 without privileges. Runs anywhere (no eBPF)."""
import os
import subprocess
import sys
import unittest

from lockswap_cli import attribute as A

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LS = "/opt/x/lib/liblockswap.so.0.9.0"
APP = "/usr/bin/app"


def fr(path, fn, called=None, off=0x100):
    return (path, off, fn, called)


class Classify(unittest.TestCase):
    def check(self, kind, frames, want_kind, want_site_fn, want_via=None):
        k, site, via = A.classify(kind, frames)
        self.assertEqual(k, want_kind)
        self.assertEqual(site[2] if site else None, want_site_fn)
        if want_via is not None:
            self.assertEqual(via, want_via)

    def test_glibc_mutex(self):
        self.check(1, [fr(LIBC, "__GI___lll_lock_wait"), fr(LIBC, "___pthread_mutex_lock"),
                       fr(APP, "worker", "pthread_mutex_lock"), fr(APP, "main")],
                   "glibc_lock", "worker", "pthread_mutex_lock")

    def test_sem_wait_through_the_plt_after_a_tail_call(self):
        # sem_wait tail-calls: only __futex_abstimed_wait_common is left; the PLT says sem_wait
        self.check(1, [fr(LIBC, "__futex_abstimed_wait_common"), fr(APP, "PGSemaphoreLock", "sem_wait")],
                   "glibc_lock", "PGSemaphoreLock", "sem_wait")

    def test_stale_program_frame_before_the_api_frame(self):
        self.check(1, [fr(LIBC, "__futex_abstimed_wait_common"), fr(APP, "~stale_fn"),
                       fr(LIBC, "__new_sem_wait_slow64"), fr(APP, "PGSemaphoreLock", "sem_wait")],
                   "glibc_lock", "PGSemaphoreLock")

    def test_own_futex_lock(self):
        self.check(1, [fr(LIBC, "syscall"), fr(APP, "my_lock", "syscall"), fr(LIBC, "__GI___nanosleep"),
                       fr(APP, "worker")], "futex", "my_lock", "syscall")

    def test_own_futex_lock_with_a_stale_lockswap_frame(self):
        self.check(1, [fr(LIBC, "syscall"), fr(LS, "lockswap::FutexMutex::lock_slow"),
                       fr(APP, "my_lock", "syscall")], "futex", "my_lock", "syscall")

    def test_own_futex_lock_through_lockswaps_syscall(self):
        # under the preload the program's syscall() is lockswap's pass-through; the PLT name of
        # the site's call may be lost to the scan
        self.check(1, [fr(LS, "timed_syscall"), fr(APP, "~unlock")], "futex", "~unlock", "syscall")
        self.check(1, [fr(LS, "timed_syscall"), fr(LIBC, "__GI___clock_gettime"), fr(APP, "srw_wait", "syscall")],
                   "futex", "srw_wait", "syscall")

    def test_lockswap_sleeps_are_not_pass_through(self):
        self.check(1, [fr(LS, "timed_syscall"), fr(LS, "lockswap::arch::futex_wait"),
                       fr(LS, "lockswap::rwsem_detail::park_sleep"), fr(APP, "worker")], "lockswap", "worker")

    def test_lockswap_cond_and_sem_sleepers(self):
        sleeper = "lockswap::(anonymous namespace)::CancellableSleeper<lockswap::%s>::sleep"
        self.check(1, [fr(LS, "timed_syscall"), fr(LS, "lockswap::arch::futex_wait"), fr(LIBC, "__GI___clock_gettime"),
                       fr(LS, sleeper % "PlainSleeper"), fr(APP, "wait_for_tasks")], "cond", "wait_for_tasks")
        self.check(1, [fr(LS, "timed_syscall"), fr(LS, "lockswap::arch::futex_wait"),
                       fr(LS, sleeper % "SemPlainSleeper"), fr(APP, "PGSemaphoreLock", "sem_wait")],
                   "lockswap", "PGSemaphoreLock")

    def test_inline_syscall(self):
        self.check(1, [fr(APP, "spin_wait"), fr(APP, "lock")], "futex", "spin_wait")

    def test_lockswap(self):
        self.check(1, [fr(LIBC, "syscall"), fr(LS, "lockswap::arch::futex_wait"), fr(LIBC, "__GI___clock_gettime"),
                       fr(LS, "lockswap::FutexMutex::lock_slow"), fr(APP, "worker", "pthread_mutex_lock")],
                   "lockswap", "worker")

    def test_lockswap_cond(self):
        self.check(1, [fr(LIBC, "syscall"), fr(LS, "lockswap::arch::futex_wait"),
                       fr(LS, "pthread_cond_wait"), fr(APP, "pool_wait")], "cond", "pool_wait")

    def test_glibc_cond_and_std_condition_variable(self):
        self.check(1, [fr(LIBC, "__futex_abstimed_wait_common"), fr(APP, "wait_for_tasks", "pthread_cond_clockwait")],
                   "cond", "wait_for_tasks")
        self.check(1, [fr(LIBC, "__futex_abstimed_wait_common"),
                       fr(APP, "task_wait", "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE")],
                   "cond", "task_wait")

    def test_malloc_is_glibc_internal(self):
        self.check(1, [fr(LIBC, "__GI___lll_lock_wait_private"), fr(LIBC, "_int_free"),
                       fr(APP, "churn", "free")], "glibc_internal", "churn", "free")

    def test_idle_and_delay_keep_their_kind(self):
        self.check(2, [fr(LIBC, "epoll_wait"), fr(APP, "WaitEventSetWait", "epoll_wait")], "idle", "WaitEventSetWait")
        self.check(3, [fr(LIBC, "__GI___select"), fr(APP, "pg_usleep", "select"), fr(APP, "perform_spin_delay")],
                   "delay", "pg_usleep")

    def test_no_frames(self):
        self.assertEqual(A.classify(1, []), ("futex", None, None))


class Output(unittest.TestCase):
    def test_parse(self):
        text = ["Attaching 30 probes...",
                "@wn[123, my, comm, 1, 202, 1, 2, 3, 4, 5, 6, 7, 8]: 4",
                "@wns[123, my, comm, 1, 202, 1, 2, 3, 4, 5, 6, 7, 8]: 4000",
                "@pgn[77, 1, WALWrite, 0]: 3", "@pgns[77, 1, WALWrite, 0]: 300",
                "@full_waits: 2", "Lost 5 events", "@keys: 1"]
        waits, probes, scalars, lost = A.parse_output(text)
        self.assertEqual(waits, {(123, "my, comm", 1, 202, (1, 2, 3, 4, 5, 6, 7, 8)): [4, 4000]})
        self.assertEqual(probes, {(77, 1, "WALWrite", 0): [3, 300]})
        self.assertEqual((scalars, lost), ({"full_waits": 2}, 5))

    def test_encoding(self):
        self.assertEqual(A.enc("a b=c%d\n"), "a%20b%3Dc%25d%0A")
        self.assertEqual(A.enc(""), "-")
        self.assertEqual(A.short("lockswap::arch::futex_wait(std::atomic<unsigned int> const*, bool)"),
                         "lockswap::arch::futex_wait")

    def test_program_is_filled_in(self):
        text = A.build_program([11, 22], "/usr/bin/postgres", 1000, 32)
        self.assertIn("@pids[11] = 1; @pids[22] = 1; @npids = 2;", text)
        self.assertIn("usdt:/usr/bin/postgres:postgresql:lwlock__wait__start", text)
        self.assertNotRegex(text, r"@(MAXKEYS|SCAN|THREAD_SIZE|PG_BIN|MAGIC)@")
        self.assertTrue(text.rstrip().endswith("}"))
        self.assertIn(f"args->pid == {A.READY_MAGIC}", text.split("tracepoint:syscalls:sys_enter_getpgid")[-1])


class Plt(unittest.TestCase):
    def test_plt_names_of_a_real_binary(self):
        exe = "/bin/sleep" if os.path.exists("/bin/sleep") else sys.executable
        code = A.ModuleCode()
        self.addCleanup(code.close)
        ranges, stubs = code._plt(exe)
        if ranges is None or not stubs:
            self.skipTest(f"{exe}: no .plt/.rela.plt to read")
        self.assertTrue(all(isinstance(n, str) and n for n in stubs.values()))
        first = min(stubs)
        self.assertTrue(code.in_plt(exe, first))
        self.assertEqual(code.plt_name(exe, first), stubs[first])


class Unprivileged(unittest.TestCase):
    def test_77_and_the_reason(self):
        if os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"):
            r = subprocess.run([sys.executable, "-m", "lockswap_cli", "attribute", "--bpftrace", "/nonexistent/bpftrace",
                                "--", "/bin/true"], capture_output=True, text=True)
        else:
            r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                sys.executable, "-m", "lockswap_cli", "attribute", "--", "/bin/true"],
                               capture_output=True, text=True, env=dict(os.environ))
        self.assertEqual(r.returncode, 77, r.stderr)
        self.assertIn("eBPF cannot be used here; missing:", r.stderr)


if __name__ == "__main__":
    unittest.main()
