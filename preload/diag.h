// preload/diag.h — what lockswap says: its own stderr, and the stop on a
// setting that cannot be used. Apart from config.h so that the parsers of
// other settings (preload/config/select.cpp) can report without knowing the
// configuration, and config.cpp can call them without a loop.
#pragma once
#include <cstddef>

namespace lockswap {

// lockswap's own stderr: a duplicate of descriptor 2 taken when the
// configuration is read (before main), kept only while statistics may still
// write to it. A program that closes its stderr and opens something else
// there never receives lockswap's text: the duplicate is checked (same
// file as when it was taken) before every use. -1: stay silent.
int diag_fd();
// Writes `s` to diag_fd() (nothing when there is none); never a
// cancellation point.
void diag(const char* s, size_t n);
void diag(const char* s);

// By load_config(): take the duplicate first thing, drop it when nothing
// will be said after start-up.
void take_diag_fd();
void drop_diag_fd();

// A setting that cannot be used: `VAR=value: why` and the valid settings on
// stderr, then exit with 2 (before main, as every setting is read then).
// The second form takes VAR's length: an unknown name from the environment
// is not NUL-terminated where it ends (at its '=').
[[noreturn]] void config_error(const char* var, const char* value, const char* why);
[[noreturn]] void config_error(const char* var, size_t var_len, const char* value, const char* why);

// What config_error says: `lockswap: VAR=value: why`, VAR and value escaped
// (they are the user's bytes), and every valid setting. Defined in
// preload/config/config.cpp, beside the tables the list is made from; declared here,
// not in config.h, because config.cpp includes this header and diag.cpp may
// not include config.h back (tests/layering refuses two files that include
// each other).
void say_refused_setting(const char* var, size_t var_len, const char* value, const char* why);

}  // namespace lockswap
