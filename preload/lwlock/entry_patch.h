// preload/lwlock/entry_patch.h — what lockswap writes at a redirected LWLock
// entry, so that the entry still works with a uprobe on it (docs/lwlock.md,
// "Redirection").
//
// An entry uprobe (perf probe, bpftrace, pg-lock-tracer) replaces the first
// instruction in the process's text with a breakpoint and, when it fires,
// runs the instruction it read from the FILE (emulated, or single-stepped
// out of line), then resumes after it. Whatever lockswap writes must
// therefore leave that first instruction in place and start right after
// it: the patch is
//
//   [the function's own first instruction][its undo, if any][absolute jump]
//
// The first instruction runs (or is emulated) as in the original; the undo
// puts the stack back where the caller left it, so lockswap's function sees
// the call exactly as the entry did. Only first instructions whose effect
// can be undone, or is dead, are accepted:
//
//   x86-64  push %reg                    undo: lea 8(%rsp),%rsp
//           endbr64                      nothing to undo
//           mov/movslq rip-rel -> %reg   %reg carries no argument of this
//           movslq %reg32,%reg           function, or is a 32-bit argument
//                                        sign-extended in place
//   arm64   stp xA, xB, [sp, #-N]!       undo: add sp, sp, #N
//           adrp xD, ...                 xD carries no argument
//
// Everything here is constexpr: allowlist.h checks every allow-listed entry
// at compile time, for both instruction sets on any host.
#pragma once
#include <cstdint>
#include <cstring>

namespace lockswap::lwlock {

enum class Isa : uint8_t { x86_64, aarch64 };

// Bytes compared at each entry and the most the patch may cover: arm64's
// kept instruction (4) + undo (4) + `ldr x16, #8; br x16` + address (16).
inline constexpr unsigned kEntryBytes = 24;

// Which integer argument registers carry an argument, and which of those are
// 32-bit: "pi" = (pointer or 64-bit, int or enum). pg15.h lists each
// function's.
using ArgKinds = const char*;

struct KeptInstruction {
  uint8_t length = 0;       // 0: not an instruction lockswap can keep in place
  uint16_t stack_undo = 0;  // bytes the instruction took off the stack
};

struct Patch {
  unsigned char bytes[kEntryBytes] = {};
  unsigned length = 0;  // written from the entry's first byte on
};

namespace entry_detail {

constexpr unsigned arg_count(ArgKinds a) {
  unsigned n = 0;
  while (a[n] != '\0') ++n;
  return n;
}

// x86-64: the argument registers in order, as register numbers.
inline constexpr uint8_t kX86ArgRegs[] = {7 /*rdi*/, 6 /*rsi*/, 2 /*rdx*/, 1 /*rcx*/, 8, 9};
inline constexpr uint8_t kX86Rax = 0, kX86R10 = 10, kX86R11 = 11;

constexpr int x86_arg_index(uint8_t reg) {
  for (int i = 0; i < 6; ++i)
    if (kX86ArgRegs[i] == reg) return i;
  return -1;
}

// A register the callee does not read at entry: a scratch register that
// carries nothing (rax: no variadic count here; r10, r11), or an argument
// register beyond this function's arguments.
constexpr bool x86_dead(uint8_t reg, ArgKinds args) {
  if (reg == kX86Rax || reg == kX86R10 || reg == kX86R11) return true;
  int i = x86_arg_index(reg);
  return i >= 0 && static_cast<unsigned>(i) >= arg_count(args);
}

constexpr bool x86_int_arg(uint8_t reg, ArgKinds args) {
  int i = x86_arg_index(reg);
  return i >= 0 && static_cast<unsigned>(i) < arg_count(args) && args[i] == 'i';
}

constexpr KeptInstruction x86_keep(const unsigned char* b, ArgKinds args) {
  if (b[0] >= 0x50 && b[0] <= 0x57) return {1, 8};                          // push %r
  if (b[0] == 0x41 && b[1] >= 0x50 && b[1] <= 0x57) return {2, 8};          // push %r8..r15
  if (b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa) return {4, 0};  // endbr64
  unsigned p = 0;
  uint8_t rex = 0;
  if ((b[0] & 0xf0) == 0x40) rex = b[p++];
  const uint8_t op = b[p], modrm = b[p + 1];
  const bool wide = (rex & 0x08) != 0;
  if (!(op == 0x8b || (op == 0x63 && wide)) || (rex & 0x02) != 0) return {};  // mov r,r/m; movslq; no REX.X
  const uint8_t mod = modrm >> 6;
  const auto dst = static_cast<uint8_t>(((modrm >> 3) & 7) | ((rex & 0x04) << 1));
  const auto src = static_cast<uint8_t>((modrm & 7) | ((rex & 0x01) << 3));
  if (mod == 0 && (modrm & 7) == 5)  // rip-relative load: writes dst only
    return x86_dead(dst, args) ? KeptInstruction{static_cast<uint8_t>(p + 6), 0} : KeptInstruction{};
  if (mod == 3 && (x86_dead(dst, args) || (op == 0x63 && dst == src && x86_int_arg(dst, args))))
    return {static_cast<uint8_t>(p + 2), 0};  // register to register; in place: the low 32 bits are unchanged
  return {};
}

constexpr uint32_t le32(const unsigned char* b) {
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

constexpr bool arm64_dead(uint32_t reg, ArgKinds args) {
  return (reg >= 9 && reg <= 17) || (reg < 8 && reg >= arg_count(args));  // x9-x17 scratch; x8 left out
}

constexpr KeptInstruction arm64_keep(const unsigned char* b, ArgKinds args) {
  const uint32_t insn = le32(b);
  if ((insn & 0xffc003e0u) == 0xa98003e0u) {  // stp xA, xB, [sp, #imm]! (64-bit, pre-index)
    const int imm7 = static_cast<int>((insn >> 15) & 0x7f);
    const int bytes = (imm7 >= 64 ? imm7 - 128 : imm7) * 8;
    return bytes < 0 ? KeptInstruction{4, static_cast<uint16_t>(-bytes)} : KeptInstruction{};
  }
  if ((insn & 0x9f000000u) == 0x90000000u && arm64_dead(insn & 31, args)) return {4, 0};  // adrp
  return {};
}

constexpr void put(Patch& p, const unsigned char* src, unsigned n) {
  for (unsigned i = 0; i < n; ++i) p.bytes[p.length++] = src[i];
}
constexpr void put64(Patch& p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p.bytes[p.length++] = static_cast<unsigned char>(v >> (8 * i));
}
constexpr void put32(Patch& p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p.bytes[p.length++] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace entry_detail

constexpr KeptInstruction keep_first_instruction(Isa isa, const unsigned char* entry, ArgKinds args) {
  return isa == Isa::x86_64 ? entry_detail::x86_keep(entry, args) : entry_detail::arm64_keep(entry, args);
}

// The patch for an entry whose first instruction is `kept` (its bytes in
// `entry`, as the file has them), jumping to `target`. Its first bytes are
// the entry's own, so writing them changes nothing a uprobe put there.
constexpr Patch make_patch(Isa isa, const unsigned char* entry, KeptInstruction kept, uint64_t target) {
  using namespace entry_detail;
  Patch p;
  put(p, entry, kept.length);
  if (isa == Isa::x86_64) {
    constexpr unsigned char kLeaRsp8[] = {0x48, 0x8d, 0x64, 0x24, 0x08};  // lea 8(%rsp),%rsp: no flags, no register
    constexpr unsigned char kJmpRip[] = {0xff, 0x25, 0, 0, 0, 0};         // jmp *0(%rip)
    if (kept.stack_undo == 8) put(p, kLeaRsp8, sizeof kLeaRsp8);
    put(p, kJmpRip, sizeof kJmpRip);
  } else {
    if (kept.stack_undo != 0) put32(p, 0x910003ffu | uint32_t{kept.stack_undo} << 10);  // add sp, sp, #N
    put32(p, 0x58000050u);  // ldr x16, #8
    put32(p, 0xd61f0200u);  // br x16
  }
  put64(p, target);
  return p;
}

// The breakpoint a uprobe leaves in place of the first instruction: what the
// entry may hold instead of it when a tracer attached before lockswap ran.
constexpr bool uprobe_breakpoint(Isa isa, const unsigned char* at) {
  return isa == Isa::x86_64 ? at[0] == 0xcc                    // int3
                            : entry_detail::le32(at) == 0xd42000a0u;  // brk #0x5 (BRK64_OPCODE_UPROBES)
}

constexpr unsigned hex_digit(char c) { return c <= '9' ? unsigned(c - '0') : unsigned(c - 'a' + 10); }

// kEntryBytes bytes from an allow-list entry's hex.
struct EntryBytes {
  unsigned char b[kEntryBytes] = {};
};
constexpr EntryBytes from_hex(const char* hex) {
  EntryBytes e;
  for (unsigned i = 0; i < kEntryBytes && hex[2 * i] != '\0'; ++i)
    e.b[i] = static_cast<unsigned char>(hex_digit(hex[2 * i]) << 4 | hex_digit(hex[2 * i + 1]));
  return e;
}

}  // namespace lockswap::lwlock
