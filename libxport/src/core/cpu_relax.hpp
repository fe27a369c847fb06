// One spin-wait hint to the CPU: x86 PAUSE, Arm YIELD, else nothing. For loops that spin on
// memory another thread or process writes (a wait's gather, a contended WordMutex).
#pragma once

namespace xport::core {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace xport::core
