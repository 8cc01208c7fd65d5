// The pooling loops compiled for the baseline x86-64 (or any other CPU) (model/pool_kernels.h).
#define ADAM_POOL_ISA baseline
#include "model/pool_kernels.h"
