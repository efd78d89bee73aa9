// preload/blocking_calls.h — the interposed waits a server makes between
// requests (preload/blocking_calls.cpp).
#pragma once

namespace lockswap::blocking {

// Resolves glibc's functions and routes every interposed wait to them
// (switch_model false: one indirect jump) or through the concurrency-id
// switch-out and switch-in around them (true). Called by load_config().
void install(bool switch_model);

}  // namespace lockswap::blocking
