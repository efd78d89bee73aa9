# cmake/aarch64-linux-gnu.cmake — cross-compile lockswap for aarch64 with
# Debian's g++-aarch64-linux-gnu (sysroot /usr/aarch64-linux-gnu).
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# Tests run under qemu-user: CMAKE_CROSSCOMPILING_EMULATOR is the statically
# linked qemu-aarch64-static when present, because a static emulator ignores
# LD_PRELOAD itself and hands it (with the rest of the environment) to the
# aarch64 program, whose own loader then preloads the aarch64 liblockswap.so.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(LOCKSWAP_CROSS_TRIPLE aarch64-linux-gnu CACHE STRING "cross toolchain prefix")
set(CMAKE_C_COMPILER ${LOCKSWAP_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${LOCKSWAP_CROSS_TRIPLE}-g++)
set(LOCKSWAP_CROSS_SYSROOT /usr/${LOCKSWAP_CROSS_TRIPLE} CACHE PATH "target libraries (qemu -L)")

# Target libraries come from the sysroot and CMAKE_PREFIX_PATH (googletest
# built for aarch64); programs such as bash come from the host.
set(CMAKE_FIND_ROOT_PATH ${LOCKSWAP_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

find_program(LOCKSWAP_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(LOCKSWAP_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${LOCKSWAP_QEMU_AARCH64} -L ${LOCKSWAP_CROSS_SYSROOT})
endif()
