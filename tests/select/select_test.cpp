// tests/select/select_test.cpp — LOCKSWAP_SELECT end to end: the rules are
// parsed before main (a bad one stops the program with the valid forms),
// each matcher picks the locks it names and only those, a lock keeps its
// variant across fork, and locks of different variants work side by side.
// The guest (select_guest.cpp) prints the variant each lock got, read from
// the tag the library keeps in the object.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

struct GuestRun {
  int status = -1;  // exit status, or -1 when killed
  std::string out, err;
  std::map<std::string, std::string> lines;  // "NAME VALUE" lines of stdout
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The guest in `mode` with LOCKSWAP_SELECT=select (unset when null) and the
// column's settings inherited.
GuestRun run_guest(const char* mode, const char* select, std::vector<std::string> env = {}) {
  char out_path[] = "/tmp/select_test_out.XXXXXX", err_path[] = "/tmp/select_test_err.XXXXXX";
  int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (select) setenv("LOCKSWAP_SELECT", select, 1);
    else unsetenv("LOCKSWAP_SELECT");
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    execl(SELECT_GUEST, SELECT_GUEST, mode, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(out_fd);
  close(err_fd);
  GuestRun r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  unlink(out_path);
  unlink(err_path);
  std::istringstream lines(r.out);
  std::string name, value;
  while (lines >> name >> value) r.lines[name] = value;
  return r;
}

std::string setting(const char* var) {
  const char* v = getenv(var);
  return v && *v ? v : "glibc";
}
// The column's process-wide variants, and a variant of each family that is
// not the column's, so that a selected lock is visibly different.
std::string base_mutex() { return setting("LOCKSWAP_MUTEX"); }
std::string base_rwlock() { return setting("LOCKSWAP_RWLOCK"); }
std::string base_sem() { return setting("LOCKSWAP_SEM"); }
std::string other_mutex() { return base_mutex() == "rwsem" ? "futex" : "rwsem"; }
std::string other_rwlock() { return base_rwlock() == "percid" ? "rwsem" : "percid"; }
std::string other_sem() { return base_sem() == "lockref" ? "futex" : "lockref"; }

#define EXPECT_RAN(r) ASSERT_EQ((r).status, 0) << "stdout:\n" << (r).out << "stderr:\n" << (r).err

TEST(SelectRules, MalformedRulesStopBeforeMainWithTheValidForms) {
  const char* bad[] = {
      "mutex=rwsem",                      // no matcher
      "mutex=nosuch@sym:g_plain",         // unknown variant
      "rwlock=futex@sym:",                // empty name
      "lock=rwsem@sym:g_plain",           // unknown family
      "mutex=rwsem@where:g_plain",        // unknown matcher
      "mutex=rwsem@site:select_guest",    // no offset
      "mutex=rwsem@site:select_guest+12", // not hexadecimal
      "mutex=rwsem@range:m+0x20-0x10",    // empty range
      "sem=percid@sym:g_sem",             // percid is no semaphore
  };
  for (const char* rule : bad) {
    GuestRun r = run_guest("tags", rule);
    EXPECT_EQ(r.status, 2) << rule;
    EXPECT_EQ(r.out, "") << rule << ": main ran";
    EXPECT_NE(r.err.find("LOCKSWAP_SELECT="), std::string::npos) << rule << ": " << r.err;
    EXPECT_NE(r.err.find("FAMILY=VARIANT@MATCHER"), std::string::npos) << rule << ": no valid forms in\n" << r.err;
  }
}

TEST(SelectRules, TooManyRulesAreRefused) {
  std::string rules;
  for (int i = 0; i < 17; ++i) rules += "mutex=futex@sym:g_plain;";
  GuestRun r = run_guest("tags", rules.c_str());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("more than 16 rules"), std::string::npos) << r.err;
}

TEST(SelectRules, ARuleThatMatchesNothingIsSaidButNotFatal) {
  GuestRun r = run_guest("tags", "mutex=futex@sym:no_such_symbol_anywhere", {"LOCKSWAP_STATS=counts"});
  EXPECT_RAN(r);
  EXPECT_NE(r.err.find("matches nothing"), std::string::npos) << r.err;
}

// What the library writes to a terminal holds no byte of the rule as such:
// an escape sequence in a rule must not reach the terminal.
TEST(SelectRules, ARuleNameIsEscapedOnStderr) {
  // ESC [ (CSI), BEL, a control byte, DEL, UTF-8 (é), C1 CSI alone and as UTF-8.
  const char* hostile = "mutex=futex@sym:x\x1b[31mred\x07\x01\x7f\xc3\xa9\x9b" "2J\xc2\x9b" "2J";
  GuestRun r = run_guest("tags", hostile);
  EXPECT_RAN(r);
  EXPECT_NE(r.err.find("matches nothing"), std::string::npos) << r.err;
  size_t raw = std::find_if(r.err.begin(), r.err.end(),
                            [](unsigned char c) { return c != '\n' && (c < 0x20 || c >= 0x7f); }) -
               r.err.begin();
  EXPECT_EQ(raw, r.err.size()) << "byte " << int(static_cast<unsigned char>(r.err[raw])) << " of stderr:\n" << r.err;
  EXPECT_NE(r.err.find("x?[31mred?????"), std::string::npos) << r.err;
}

TEST(SelectMatch, WithoutRulesNoObjectCarriesATag) {
  GuestRun r = run_guest("tags", nullptr);
  EXPECT_RAN(r);
  for (const char* lock : {"g_table.inner", "g_plain", "heap", "g_rw_swapped", "g_sem"})
    EXPECT_EQ(r.lines[lock], "undecided") << lock;
}

TEST(SelectMatch, SymbolPicksAGlobalAndALockInsideALargerStruct) {
  std::string rules = "mutex=" + other_mutex() + "@sym:g_table;mutex=" + other_mutex() + "@sym:g_plain;rwlock=" +
                      other_rwlock() + "@sym:g_rw_swapped;sem=" + other_sem() + "@sym:g_sem";
  GuestRun r = run_guest("tags", rules.c_str());
  EXPECT_RAN(r);
  EXPECT_EQ(r.lines["g_table.inner"], other_mutex());
  EXPECT_EQ(r.lines["g_plain"], other_mutex());
  EXPECT_EQ(r.lines["g_rw_swapped"], other_rwlock());
  EXPECT_EQ(r.lines["g_sem"], other_sem());
  // Unmatched: the column's variants.
  EXPECT_EQ(r.lines["g_site"], base_mutex());
  EXPECT_EQ(r.lines["heap"], base_mutex());
  EXPECT_EQ(r.lines["other"], base_mutex());
  EXPECT_EQ(r.lines["g_rw_other"], base_rwlock());
}

// Mutex rules (each swapping to other_mutex()): the `picked` locks get that
// variant, the `kept` ones the column's.
void expect_mutex_rules(const std::vector<std::string>& matchers, const std::vector<std::string>& picked,
                        const std::vector<std::string>& kept) {
  std::string rules;
  for (const std::string& m : matchers) rules += "mutex=" + other_mutex() + "@" + m + ";";
  GuestRun r = run_guest("tags", rules.c_str());
  EXPECT_RAN(r);
  for (const std::string& lock : picked) EXPECT_EQ(r.lines[lock], other_mutex()) << lock << " under " << rules;
  for (const std::string& lock : kept) EXPECT_EQ(r.lines[lock], base_mutex()) << lock << " under " << rules;
}

TEST(SelectMatch, CxxNamesMatchTheirManglings) {
  expect_mutex_rules({"sym:s_static_lock", "sym:ns::g_ns_lock", "func:ns::init_in_ns(pthread_mutex_t*, int)"},
                     {"s_static_lock", "ns::g_ns_lock", "in_ns"}, {"g_plain"});
}

TEST(SelectMatch, APlainFunctionNameMatchesAMemberOrNamespacedFunction) {
  expect_mutex_rules({"func:init_in_ns"}, {"in_ns"}, {"heap"});
}

TEST(SelectMatch, FunctionOfTheInitCallPicksAHeapLock) {
  expect_mutex_rules({"func:init_heap_lock"}, {"heap"}, {"other", "g_plain"});
}

TEST(SelectMatch, ZeroFilledObjectIsDecidedAtItsFirstLock) {
  expect_mutex_rules({"func:first_locker"}, {"g_first_locked"}, {"g_plain"});
}

TEST(SelectMatch, FirstMatchingRuleWins) {
  std::string rules = "mutex=" + other_mutex() + "@sym:g_plain;mutex=" + base_mutex() + "@sym:g_plain";
  GuestRun r = run_guest("tags", rules.c_str());
  EXPECT_RAN(r);
  EXPECT_EQ(r.lines["g_plain"], other_mutex());
}

TEST(SelectMatch, RangeOfLinkTimeAddressesPicksTheObject) {
  GuestRun a = run_guest("addresses", nullptr);
  EXPECT_RAN(a);
  unsigned long at = std::stoul(a.lines["g_plain_vaddr"], nullptr, 16);
  char range[128];
  snprintf(range, sizeof range, "range:select_guest+%#lx-%#lx", at, at + 40);
  expect_mutex_rules({range}, {"g_plain"}, {"g_table.inner"});
}

// The workflow: the statistics name a site (module+offset, as `lockswap
// report` prints it from the dump's site and map records); a rule with that
// site swaps the lock first taken there.
TEST(SelectMatch, SiteAsTheReportPrintsItPicksTheLockFirstTakenThere) {
  char path[] = "/tmp/select_test_stats.XXXXXX";
  close(mkstemp(path));
  GuestRun p = run_guest("site", nullptr, {"LOCKSWAP_STATS=profile", std::string("LOCKSWAP_STATS_FILE=") + path});
  EXPECT_RAN(p);
  std::string lock_addr = p.lines["g_site_addr"];
  std::string dump = slurp(path);
  unlink(path);
  // lock id of g_site, its lock site's ip, the executable mapping holding it.
  std::istringstream in(dump);
  std::string line, lock_id;
  unsigned long ip = 0, file_off = 0;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  auto field = [](const std::string& l, const std::string& key) {
    size_t at = l.find(" " + key + "=");
    if (at == std::string::npos) return std::string();
    size_t from = at + key.size() + 2;
    return l.substr(from, l.find(' ', from) - from);
  };
  for (const auto& l : lines)
    if (l.find(" lock ") != std::string::npos && field(l, "addr") == lock_addr) lock_id = field(l, "id");
  ASSERT_FALSE(lock_id.empty()) << "no lock record for " << lock_addr << " in\n" << dump;
  for (const auto& l : lines)
    if (l.find(" site ") != std::string::npos && field(l, "lock") == lock_id && field(l, "op") == "lock")
      ip = std::stoul(field(l, "ip"), nullptr, 16);
  ASSERT_NE(ip, 0u) << dump;
  for (const auto& l : lines) {
    if (l.find(" map ") == std::string::npos || field(l, "path").find("select_guest") == std::string::npos) continue;
    unsigned long start = std::stoul(field(l, "start"), nullptr, 16), end = std::stoul(field(l, "end"), nullptr, 16);
    if (ip >= start && ip < end) file_off = ip - start + std::stoul(field(l, "offset"), nullptr, 16);
  }
  ASSERT_NE(file_off, 0u) << dump;
  char site[128];
  snprintf(site, sizeof site, "site:select_guest+%#lx", file_off);
  expect_mutex_rules({site}, {"g_site"}, {"g_plain"});
}

// report -> pick -> swap: the profiled run says which variant the lock ran
// (the lock record's variant=), `lockswap report` prints a selector for its
// site, and that selector, given back, swaps that lock alone.
TEST(SelectWorkflow, TheReportsSelectorSwapsTheLockItNames) {
  char path[] = "/tmp/select_test_flow.XXXXXX";
  close(mkstemp(path));
  std::string swapped = "mutex=" + other_mutex() + "@sym:g_site";
  GuestRun p = run_guest("site", swapped.c_str(),
                         {"LOCKSWAP_STATS=profile", std::string("LOCKSWAP_STATS_FILE=") + path});
  EXPECT_RAN(p);
  std::string dump = slurp(path), lock_line;
  std::istringstream in(dump);
  for (std::string l; std::getline(in, l);)
    if (l.find(" lock ") != std::string::npos && l.find(" addr=" + p.lines["g_site_addr"] + " ") != std::string::npos)
      lock_line = l;
  EXPECT_NE(lock_line.find(" variant=" + other_mutex() + " "), std::string::npos) << dump;
  std::string cmd = std::string("env -u LD_PRELOAD ") + LOCKSWAP_COMMAND + " report --symbol-budget 30 " + path + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string report;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) report.append(buf, n);
  pclose(f);
  unlink(path);
  std::string marker = "--select 'mutex=VARIANT@";
  size_t at = report.find(marker);
  ASSERT_NE(at, std::string::npos) << report;
  at += marker.size();
  std::string matcher = report.substr(at, report.find('\'', at) - at);
  EXPECT_EQ(matcher.rfind("site:select_guest+0x", 0), 0u) << report;
  expect_mutex_rules({matcher}, {"g_site"}, {"g_plain"});
}

TEST(SelectLife, AForkedChildKeepsEachLocksVariant) {
  std::string rules = "mutex=" + other_mutex() + "@sym:g_plain;rwlock=" + other_rwlock() + "@sym:g_rw_swapped";
  GuestRun r = run_guest("fork", rules.c_str());
  EXPECT_RAN(r);
  std::istringstream in(r.out);
  std::string who, lock, variant;
  int seen = 0;
  while (in >> who >> lock >> variant) {
    EXPECT_EQ(variant, lock == "g_plain" ? other_mutex() : other_rwlock()) << who << " " << lock;
    ++seen;
  }
  EXPECT_EQ(seen, 4) << r.out;
}

TEST(SelectLife, MixedVariantsInOneProcessUnderContention) {
  std::string rules = "mutex=" + other_mutex() + "@sym:g_plain;rwlock=" + other_rwlock() + "@sym:g_rw_swapped";
  GuestRun r = run_guest("mixed", rules.c_str());
  EXPECT_RAN(r);
  EXPECT_EQ(r.lines["rw_writes"], r.lines["expected"]);
  EXPECT_EQ(r.lines["g_plain"], other_mutex());
  EXPECT_EQ(r.lines["g_table.inner"], base_mutex());
  EXPECT_EQ(r.lines["g_rw_swapped"], other_rwlock());
  EXPECT_EQ(r.lines["g_rw_other"], base_rwlock());
}

// The "selected" records of a dump: family, variant, rule and events each.
struct SelectedRecord {
  std::string family, variant, rule;
  std::map<std::string, uint64_t> events;
};
std::string field(const std::string& line, const std::string& key) {
  size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  at += key.size() + 2;
  return line.substr(at, line.find(' ', at) - at);
}
std::vector<SelectedRecord> selected_records(const std::string& dump, std::map<std::string, uint64_t>& totals) {
  std::vector<SelectedRecord> out;
  std::istringstream in(dump);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("lockswap-v1 event ", 0) == 0) totals[field(l, "name")] += std::stoull(field(l, "count"));
    if (l.rfind("lockswap-v1 selected ", 0) != 0) continue;
    SelectedRecord r{field(l, "family"), field(l, "variant"), field(l, "rule"), {}};
    std::istringstream items(field(l, "events"));
    for (std::string item; std::getline(items, item, ';');)
      if (size_t colon = item.find(':'); colon != std::string::npos)
        r.events[item.substr(0, colon)] = std::stoull(item.substr(colon + 1));
    out.push_back(r);
  }
  return out;
}

// A selected lock's lock events are counted for it as well as for the
// process: only its own variant's events, never more than the process's.
TEST(SelectStats, ASelectedLockCountsItsOwnLockEvents) {
  char path[] = "/tmp/select_test_events.XXXXXX";
  close(mkstemp(path));
  std::string rules = "mutex=" + other_mutex() + "@sym:g_plain;rwlock=" + other_rwlock() + "@sym:g_rw_swapped";
  GuestRun r = run_guest("mixed", rules.c_str(), {"LOCKSWAP_STATS=counts", std::string("LOCKSWAP_STATS_FILE=") + path});
  EXPECT_RAN(r);
  std::string dump = slurp(path);
  unlink(path);
  std::map<std::string, uint64_t> totals;
  std::vector<SelectedRecord> sel = selected_records(dump, totals);
  ASSERT_EQ(sel.size(), 2u) << dump;
  uint64_t counted = 0;
  for (const SelectedRecord& s : sel) {
    bool mutex = s.family == "mutex";
    EXPECT_EQ(s.variant, mutex ? other_mutex() : other_rwlock()) << dump;
    EXPECT_EQ(s.rule, mutex ? "0" : "1") << dump;
    // percid's writers run its inner rwsem; a futex lock counts futex events
    // only; any sleep inside lockswap may give back a concurrency id (cid_*)
    std::string prefix = s.variant == "futex" ? "futex_" : s.variant == "percid" ? "" : "rwsem_";
    for (const auto& [name, n] : s.events) {
      EXPECT_TRUE(name.rfind(prefix, 0) == 0 || name.rfind("cid_", 0) == 0)
          << name << " counted for a " << s.variant << " lock:\n" << dump;
      EXPECT_LE(n, totals[name]) << name << "\n" << dump;
      counted += n;
    }
  }
  EXPECT_GT(counted, 0u) << "two contended selected locks counted no event:\n" << dump;
  EXPECT_NE(dump.find("lockswap-v1 rule index=0 text=mutex%3D"), std::string::npos) << dump;
}

}  // namespace
