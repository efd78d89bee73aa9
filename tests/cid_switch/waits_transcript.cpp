// tests/cid_switch/waits_transcript.cpp — every wait preload/blocking_calls.cpp
// interposes, in the cases a caller can tell apart: ready, timeout, bad
// argument, EINTR from a handler without SA_RESTART, a pending signal, and
// cancellation while blocked (the thread unwinds, its cleanup runs). Prints
// one line per call: the return value, errno (by name) and what the call
// wrote back. The runner diffs the transcript of a run without the preload
// against runs with it; the last line counts the calls made, those
// cancelled and those made with asynchronous cancellation (which wait
// unswitched), for the runner's check of the switch-out / switch-in pairing.
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace {

int g_calls = 0;      // interposable waits called by this program
int g_cancelled = 0;  // of which cancelled while blocked
int g_async = 0;      // of which made with asynchronous cancellation (not switched)

const char* err_name(int e) {
  if (e == 0) return "0";
  const char* n = strerrorname_np(e);
  return n ? n : "?";
}

// One call, counted; errno is cleared first so that a call that does not
// set it shows 0.
#define CALL(expr)  \
  ({                \
    ++g_calls;      \
    errno = 0;      \
    auto rc_ = (expr); \
    rc_;            \
  })

void line(const char* what, long rc, const char* extra = "") {
  int e = errno;
  printf("%-44s rc=%ld errno=%s %s\n", what, rc, err_name(e), extra);
  fflush(stdout);
}

struct Pipe {
  int r, w;
  Pipe() {
    int fds[2];
    if (pipe(fds) != 0) _exit(90);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    close(r);
    close(w);
  }
  void fill() {
    if (write(w, "x", 1) != 1) _exit(91);
  }
};

std::atomic<bool> g_handled{false};
void on_usr1(int) { g_handled = true; }

// SIGUSR1 to `target` every 20 ms until stop(): the first one that arrives
// while the target is blocked interrupts its wait, however late the target
// gets there on a loaded machine (one that arrives before only runs the
// handler). usleep: glibc calls its own nanosleep internally, not the
// interposed one, so the helper's waits are not counted.
class Interrupter {
 public:
  explicit Interrupter(pthread_t target) : target_(target) {
    pthread_create(&helper_, nullptr, [](void* self) -> void* {
      auto* me = static_cast<Interrupter*>(self);
      while (!me->done_) {
        usleep(20'000);
        if (!me->done_) pthread_kill(me->target_, SIGUSR1);
      }
      return nullptr;
    }, this);
  }
  void stop() {  // keeps errno: the wait's is printed after
    if (done_.exchange(true)) return;
    int saved = errno;
    pthread_join(helper_, nullptr);
    errno = saved;
  }
  ~Interrupter() { stop(); }

 private:
  pthread_t target_;
  pthread_t helper_;
  std::atomic<bool> done_{false};
};

void install_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the wait returns EINTR
  sigaction(SIGUSR1, &sa, nullptr);
}

void epoll_cases() {
  int ep = epoll_create1(0);
  Pipe p;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = 7;
  epoll_ctl(ep, EPOLL_CTL_ADD, p.r, &ev);
  epoll_event out[4]{};
  line("epoll_wait empty timeout 0", CALL(epoll_wait(ep, out, 4, 0)));
  line("epoll_wait empty timeout 20ms", CALL(epoll_wait(ep, out, 4, 20)));
  line("epoll_wait bad fd", CALL(epoll_wait(-1, out, 4, 0)));
  line("epoll_wait maxevents 0", CALL(epoll_wait(ep, out, 0, 0)));
  {
    Interrupter i(pthread_self());
    int rc = CALL(epoll_wait(ep, out, 4, -1));
    i.stop();
    line("epoll_wait -1 interrupted", rc);
  }
  sigset_t none;
  sigemptyset(&none);
  line("epoll_pwait empty timeout 5ms mask", CALL(epoll_pwait(ep, out, 4, 5, &none)));
  timespec five{0, 5'000'000};
  line("epoll_pwait2 empty timeout 5ms", CALL(epoll_pwait2(ep, out, 4, &five, nullptr)));
  timespec bad{0, -1};
  line("epoll_pwait2 bad timespec", CALL(epoll_pwait2(ep, out, 4, &bad, nullptr)));
  p.fill();
  char buf[32];
  int n = CALL(epoll_wait(ep, out, 4, -1));
  snprintf(buf, sizeof buf, "events=%#x data=%u", out[0].events, out[0].data.u32);
  line("epoll_wait ready", n, buf);
  line("epoll_pwait ready", CALL(epoll_pwait(ep, out, 4, -1, nullptr)));
  close(ep);
}

void poll_cases() {
  Pipe p;
  pollfd fd{p.r, POLLIN, 0};
  line("poll no fds timeout 0", CALL(poll(nullptr, 0, 0)));
  line("poll pipe timeout 20ms", CALL(poll(&fd, 1, 20)));
  volatile nfds_t too_many = nfds_t{1} << 30;  // (volatile: the compiler would warn of the overflow)
  line("poll nfds over the limit", CALL(poll(&fd, too_many, 0)));
  {
    Interrupter i(pthread_self());
    int rc = CALL(poll(&fd, 1, -1));
    i.stop();
    line("poll -1 interrupted", rc);
  }
  timespec one{0, 1'000'000}, bad{0, -1};
  line("ppoll timeout 1ms", CALL(ppoll(&fd, 1, &one, nullptr)));
  line("ppoll bad timespec", CALL(ppoll(&fd, 1, &bad, nullptr)));
  p.fill();
  char buf[32];
  int n = CALL(poll(&fd, 1, -1));
  snprintf(buf, sizeof buf, "revents=%#x", fd.revents);
  line("poll ready", n, buf);
}

void select_cases() {
  Pipe p;
  fd_set r;
  FD_ZERO(&r);
  FD_SET(p.r, &r);
  timeval tv{0, 1000};
  line("select nfds -1", CALL(select(-1, nullptr, nullptr, nullptr, &tv)));
  tv = {0, 1000};
  int n = CALL(select(p.r + 1, &r, nullptr, nullptr, &tv));
  char buf[64];
  snprintf(buf, sizeof buf, "left=%ld.%06ld set=%d", static_cast<long>(tv.tv_sec), static_cast<long>(tv.tv_usec),
           FD_ISSET(p.r, &r) ? 1 : 0);
  line("select timeout 1ms", n, buf);
  {
    Interrupter i(pthread_self());
    FD_SET(p.r, &r);
    int rc = CALL(select(p.r + 1, &r, nullptr, nullptr, nullptr));
    i.stop();
    line("select forever interrupted", rc);
  }
  timespec one{0, 1'000'000};
  FD_SET(p.r, &r);
  line("pselect timeout 1ms", CALL(pselect(p.r + 1, &r, nullptr, nullptr, &one, nullptr)));
  p.fill();
  FD_SET(p.r, &r);
  line("select ready", CALL(select(p.r + 1, &r, nullptr, nullptr, nullptr)));
}

void sleep_cases() {
  timespec one{0, 1'000'000}, bad{0, -1}, rem{};
  line("nanosleep 1ms", CALL(nanosleep(&one, &rem)));
  line("nanosleep bad timespec", CALL(nanosleep(&bad, &rem)));
  {
    Interrupter i(pthread_self());
    timespec long_one{5, 0};
    int rc = CALL(nanosleep(&long_one, &rem));
    i.stop();
    line("nanosleep 5s interrupted", rc, rem.tv_sec > 0 && rem.tv_sec < 5 ? "rem=written" : "rem=?");
  }
  line("clock_nanosleep 1ms", CALL(clock_nanosleep(CLOCK_MONOTONIC, 0, &one, nullptr)));
  line("clock_nanosleep thread cpu clock", CALL(clock_nanosleep(CLOCK_THREAD_CPUTIME_ID, 0, &one, nullptr)));
  timespec past{1, 0};
  line("clock_nanosleep abs in the past", CALL(clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &past, nullptr)));
  {
    Interrupter i(pthread_self());
    timespec long_one{5, 0};
    int rc = CALL(clock_nanosleep(CLOCK_MONOTONIC, 0, &long_one, &rem));
    i.stop();
    line("clock_nanosleep 5s interrupted", rc);
  }
}

void sigwait_cases() {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  raise(SIGUSR2);
  int sig = 0;
  int rc = CALL(sigwait(&set, &sig));
  line("sigwait pending", rc, sig == SIGUSR2 ? "sig=SIGUSR2" : "sig=?");
  raise(SIGUSR2);
  siginfo_t info{};
  rc = CALL(sigwaitinfo(&set, &info));
  char code[32];
  snprintf(code, sizeof code, "si_code=%d", info.si_code);
  line("sigwaitinfo pending", rc, code);
  timespec one{0, 1'000'000}, bad{0, -1};
  line("sigtimedwait nothing pending 1ms", CALL(sigtimedwait(&set, &info, &one)));
  line("sigtimedwait bad timespec", CALL(sigtimedwait(&set, &info, &bad)));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// Cancellation while blocked: the call is a cancellation point, the thread
// unwinds through it and its cleanup handler runs.
std::atomic<int> g_entered{0};
std::atomic<int> g_cleanups{0};
void count_cleanup(void*) { ++g_cleanups; }

template <class Wait>
void cancel_case(const char* what, Wait wait) {
  static Wait* w;
  w = &wait;
  g_entered = 0;
  pthread_t t;
  pthread_create(&t, nullptr, [](void*) -> void* {
    pthread_cleanup_push(count_cleanup, nullptr);
    g_entered = 1;
    (*w)();
    pthread_cleanup_pop(0);
    return nullptr;
  }, nullptr);
  while (g_entered == 0) usleep(1000);
  usleep(30'000);  // inside the wait by now (if not, the pending cancel is acted on at its start)
  pthread_cancel(t);
  void* result = nullptr;
  pthread_join(t, &result);
  ++g_calls;
  ++g_cancelled;
  printf("%-44s cancelled=%s cleanups=%d\n", what, result == PTHREAD_CANCELED ? "yes" : "no", g_cleanups.load());
  fflush(stdout);
}

void cancel_cases() {
  static Pipe p;
  cancel_case("epoll_wait cancelled", [] {
    int ep = epoll_create1(0);
    epoll_event ev{EPOLLIN, {}};
    epoll_ctl(ep, EPOLL_CTL_ADD, p.r, &ev);
    epoll_event out;
    epoll_wait(ep, &out, 1, -1);
  });
  cancel_case("poll cancelled", [] {
    pollfd fd{p.r, POLLIN, 0};
    poll(&fd, 1, -1);
  });
  cancel_case("select cancelled", [] {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(p.r, &r);
    select(p.r + 1, &r, nullptr, nullptr, nullptr);
  });
  cancel_case("nanosleep cancelled", [] {
    timespec t{60, 0};
    nanosleep(&t, nullptr);
  });
  cancel_case("poll cancelled, asynchronous type", [] {
    ++g_async;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, nullptr);
    pollfd fd{p.r, POLLIN, 0};
    poll(&fd, 1, -1);
  });
  cancel_case("sigwait cancelled", [] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    int sig;
    sigwait(&set, &sig);
  });
}

}  // namespace

int main() {
  install_handler();
  epoll_cases();
  poll_cases();
  select_cases();
  sleep_cases();
  sigwait_cases();
  cancel_cases();
  printf("handler ran: %s\n", g_handled ? "yes" : "no");
  printf("calls %d cancelled %d asynchronous %d\n", g_calls, g_cancelled, g_async);
  return 0;
}
