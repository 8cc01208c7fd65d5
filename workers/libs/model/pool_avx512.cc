// The pooling loops compiled for AVX-512 (F, BW, VL, DQ: oneDNN's avx512_core)
// (model/pool_kernels.h).
#define ADAM_POOL_ISA avx512
#include "model/pool_kernels.h"
