// tests/select/select_test.cpp — LOCKSWAP_SELECT end to end: the rules are
// parsed before main (a bad one stops the program with the valid forms),
// each matcher picks the locks it names and only those, a lock keeps its
// variant across fork, and locks of different variants work side by side.
// The guest (select_guest.cpp) prints the variant each lock got, read from
// the tag the library keeps in the object. Hostile input: a rule's bytes
// reach stderr escaped, and a crafted file where the vDSO's name would be
// looked up is never read.
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

struct GuestRun {
  int status = -1;  // exit status, or -1 when killed
  int signal = 0;    // the signal that killed it
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
// column's settings inherited; in directory `cwd` when given.
GuestRun run_guest(const char* mode, const char* select, std::vector<std::string> env = {},
                   const char* cwd = nullptr) {
  char out_path[] = "/tmp/select_test_out.XXXXXX", err_path[] = "/tmp/select_test_err.XXXXXX";
  int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (cwd != nullptr && chdir(cwd) != 0) _exit(126);
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
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
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

// ------------------------------------------------ hostile files, the vDSO

// A 64-bit ELF header and `shdrs` section headers right behind it, then
// `tail` bytes: the files sym:/func: resolution must survive.
std::string elf_file(const Elf64_Ehdr& eh, const std::vector<Elf64_Shdr>& shdrs, const std::string& tail = "") {
  std::string f(reinterpret_cast<const char*>(&eh), sizeof eh);
  for (const Elf64_Shdr& sh : shdrs) f.append(reinterpret_cast<const char*>(&sh), sizeof sh);
  return f + tail;
}

Elf64_Ehdr elf_header(uint64_t shoff, uint16_t shnum) {
  Elf64_Ehdr eh{};
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof eh;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shoff = shoff;
  eh.e_shnum = shnum;
  return eh;
}

Elf64_Shdr section(uint32_t type, uint64_t offset, uint64_t size, uint32_t link = 0, uint64_t entsize = 0) {
  Elf64_Shdr sh{};
  sh.sh_type = type;
  sh.sh_offset = offset;
  sh.sh_size = size;
  sh.sh_link = link;
  sh.sh_entsize = entsize;
  return sh;
}

// Section tables whose bounds wrap around 2^64: offset + size (or the
// header table's end) overflows to a small number that passes a naive
// `end <= file size`, while the offset alone points far outside the file
// (2^63: a non-canonical address on x86-64, which faults for certain).
std::vector<std::pair<std::string, std::string>> wrapping_elf_files() {
  constexpr uint64_t kFar = 1ull << 63;
  constexpr uint64_t kHdrs = sizeof(Elf64_Ehdr);
  Elf64_Sym sym{};
  sym.st_name = 1;
  sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
  sym.st_shndx = 1;
  sym.st_size = 8;
  std::string syms(2 * sizeof sym, '\0');
  memcpy(&syms[sizeof sym], &sym, sizeof sym);
  std::string strs("\0g_plain\0", 9);
  uint64_t tables = kHdrs + 2 * sizeof(Elf64_Shdr);
  return {
      {"symtab-wraps", elf_file(elf_header(kHdrs, 2), {section(SHT_DYNSYM, kFar, kFar + 48, 1, sizeof sym),
                                                         section(SHT_STRTAB, tables, strs.size())},
                                strs)},
      {"strtab-wraps", elf_file(elf_header(kHdrs, 2), {section(SHT_SYMTAB, tables, syms.size(), 1, sizeof sym),
                                                         section(SHT_STRTAB, kFar, kFar + 16)},
                                syms)},
      {"shoff-wraps", elf_file(elf_header(0 - 4096ull, 4096 / sizeof(Elf64_Shdr) + 1), {})},
      {"huge-shnum", elf_file(elf_header(kHdrs, 0xffff), {section(SHT_SYMTAB, tables, syms.size(), 0xfffe, 24)})},
  };
}

struct TempDir {
  char path[64] = "/tmp/select_test_dir.XXXXXX";
  TempDir() { EXPECT_NE(mkdtemp(path), nullptr); }
  ~TempDir() { EXPECT_EQ(system((std::string("rm -rf ") + path).c_str()), 0); }
  void write(const char* name, const std::string& bytes) const {
    std::ofstream(std::string(path) + "/" + name, std::ios::binary) << bytes;
  }
};

// The vDSO is listed by dl_iterate_phdr as "linux-vdso.so.1", a name and not
// a file: a file of that name in the working directory is never read. Each
// crafted file must leave the run as it is without it.
TEST(SelectHostile, AFileNamedLikeTheVdsoInTheWorkingDirectoryIsNotRead) {
  std::string rules = "mutex=" + other_mutex() + "@sym:g_plain;rwlock=" + other_rwlock() + "@func:no_such_function";
  TempDir clean;
  GuestRun want = run_guest("tags", rules.c_str(), {}, clean.path);
  EXPECT_RAN(want);
  EXPECT_EQ(want.lines["g_plain"], other_mutex());
  for (const auto& [what, bytes] : wrapping_elf_files()) {
    TempDir dir;
    dir.write("linux-vdso.so.1", bytes);
    GuestRun r = run_guest("tags", rules.c_str(), {}, dir.path);
    EXPECT_EQ(r.status, 0) << what << ": killed by signal " << r.signal << "; stderr\n" << r.err;
    EXPECT_EQ(r.out, want.out) << what;
    EXPECT_EQ(r.err, want.err) << what;
  }
}

// The vDSO's own symbols are read from its image in memory.
TEST(SelectHostile, TheVdsoIsSearchedInMemory) {
  if (getauxval(AT_SYSINFO_EHDR) == 0) GTEST_SKIP() << "no vDSO";
#if defined(__x86_64__)
  const char* rule = "mutex=futex@func:__vdso_clock_gettime";
#else
  const char* rule = "mutex=futex@func:__kernel_clock_gettime";
#endif
  TempDir dir;
  dir.write("linux-vdso.so.1", "");
  GuestRun r = run_guest("tags", rule, {}, dir.path);
  EXPECT_RAN(r);
  EXPECT_EQ(r.err.find("matches nothing"), std::string::npos) << r.err;
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
    // only; any sleep inside lockswap may give back a concurrency id (cid_*);
    // the wait accounting of every variant is the lock's own family's
    // (wait_<family>_*, spin_<family>_ns), never another family's
    std::string prefix = s.variant == "futex" ? "futex_" : s.variant == "percid" ? "" : "rwsem_";
    const std::string own_wait = "wait_" + s.family + "_", own_spin = "spin_" + s.family + "_";
    for (const auto& [name, n] : s.events) {
      bool accounting = name.rfind(own_wait, 0) == 0 || name.rfind(own_spin, 0) == 0;
      EXPECT_TRUE(name.rfind(prefix, 0) == 0 || name.rfind("cid_", 0) == 0 || accounting)
          << name << " counted for a " << s.variant << " lock:\n" << dump;
      EXPECT_LE(n, totals[name]) << name << "\n" << dump;
      counted += n;
    }
  }
  EXPECT_GT(counted, 0u) << "two contended selected locks counted no event:\n" << dump;
  EXPECT_NE(dump.find("lockswap-v1 rule index=0 text=mutex%3D"), std::string::npos) << dump;
}

}  // namespace
