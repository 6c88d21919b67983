// The instruction set a kernel file is compiled for, and the namespace its kernels live in.
//
// Every kernel file under csrc/cpu/ chooses its vector code by the compiler's macros (__AVX2__,
// __AVX512F__, ...) and puts its definitions in namespace decodelab::DECODELAB_ISA. A build that
// compiles those files once per instruction set (each with its own -m flags and -DDECODELAB_ISA)
// then holds every variant side by side, and cpu/dispatch.cc is the one place that picks one. This
// build compiles them once, for the building machine (-march=native), and dispatch.cc calls that.
#pragma once

// AVX-512 (F, BW, DQ, VL): the 512-bit variants of the kernels, where a machine has them.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__FMA__)
#define DECODELAB_AVX512 1
#endif
#if defined(DECODELAB_AVX512) && defined(__AVX512VNNI__)
#define DECODELAB_VNNI512 1
#endif

#if !defined(DECODELAB_ISA)
#if defined(DECODELAB_VNNI512)
#define DECODELAB_ISA avx512_vnni
#elif defined(DECODELAB_AVX512)
#define DECODELAB_ISA avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define DECODELAB_ISA avx2
#else
#define DECODELAB_ISA generic
#endif
#endif
