// preload/pthread/variants/sem.h — a semaphore of core/sem.h laid over sem_t.
//
// One adapter template serves every native semaphore variant: the classes in
// core/sem.h keep glibc's sem_t layout (value in the low half of the word at
// offset 0, glibc's `private` field at offset 8, written with glibc's values;
// preload/abi.h), so the same
// bytes work whether sem_init, sem_open or a zero fill created them.
#pragma once
#include <semaphore.h>

#include <cstddef>

#include "core/sem.h"
#include "preload/abi.h"

namespace lockswap {

template <class Sem>
struct SemVariantOf {
  static constexpr bool forwards_to_glibc = false;
  static SemWords& words(sem_t* s) { return *reinterpret_cast<SemWords*>(s); }
  static Sem at(sem_t* s) { return Sem{words(s)}; }
  static void init(sem_t* s, unsigned value, bool shared) {
    Sem::init(words(s), value, shared ? abi::kSemSharedFlag : 0);
  }
  static int trywait(sem_t* s) { return at(s).trywait(); }
  template <class Sleeper>
  static int wait(sem_t* s, const WaitCtx& ctx) {
    return at(s).template wait<Sleeper>(ctx);
  }
  template <class Result = sem_detail::ErrorCode>
  static int post(sem_t* s) {
    return at(s).template post<Result>();
  }
  static int value(sem_t* s) { return at(s).value(); }
};
static_assert(sizeof(SemWords) <= sizeof(sem_t), "fits glibc's 32-byte sem_t");
static_assert(alignof(SemWords) <= alignof(sem_t), "no stricter alignment than sem_t");
static_assert(offsetof(SemWords, data) == abi::kSemValueOffset);
static_assert(offsetof(SemWords, private_flag) == abi::kSemPrivateOffset);

}  // namespace lockswap
