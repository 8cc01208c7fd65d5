// The pooling loops compiled for AVX2 and FMA (model/pool_kernels.h).
#define ADAM_POOL_ISA avx2
#include "model/pool_kernels.h"
