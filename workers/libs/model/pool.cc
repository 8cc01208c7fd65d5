// Pooling over whole windows (model/pool.h): the loops (model/pool_kernels.h) are compiled
// once per instruction set, and the copy used is the one for the set oneDNN runs its own kernels
// with: the CPU's widest, or what ONEDNN_MAX_CPU_ISA caps it at (which is how bench/trainer.py
// measures an AVX2 CPU on an AVX-512 one).
#include "model/pool.h"

#include "oneapi/dnnl/dnnl.hpp"

namespace adam::model {

#define ADAM_POOL_DECLARE(isa)                                                                 \
  void MaxPoolForward_##isa(const PoolShape& s, const float* src, float* dst, int32_t* where); \
  void MaxPoolBackward_##isa(const PoolShape& s, const float* diff_dst, const int32_t* where,  \
                             float* diff_src);                                                 \
  void AvgPoolForward_##isa(const PoolShape& s, const float* src, float* dst);                 \
  void AvgPoolBackward_##isa(const PoolShape& s, const float* diff_dst, float* diff_src);

ADAM_POOL_DECLARE(baseline)
#ifdef ADAM_POOL_X86
ADAM_POOL_DECLARE(avx2)
ADAM_POOL_DECLARE(avx512)
#endif

namespace {

struct Kernels {
  void (*max_forward)(const PoolShape&, const float*, float*, int32_t*);
  void (*max_backward)(const PoolShape&, const float*, const int32_t*, float*);
  void (*avg_forward)(const PoolShape&, const float*, float*);
  void (*avg_backward)(const PoolShape&, const float*, float*);
  const char* isa;
};

#define ADAM_POOL_KERNELS(isa)                                                                     \
  Kernels {                                                                                        \
    MaxPoolForward_##isa, MaxPoolBackward_##isa, AvgPoolForward_##isa, AvgPoolBackward_##isa, #isa \
  }

bool Has(dnnl::cpu_isa isa, dnnl::cpu_isa want) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

const Kernels& Pick() {
  static const Kernels chosen = [] {
#ifdef ADAM_POOL_X86
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    if (Has(isa, dnnl::cpu_isa::avx512_core)) return ADAM_POOL_KERNELS(avx512);
    if (Has(isa, dnnl::cpu_isa::avx2)) return ADAM_POOL_KERNELS(avx2);
#endif
    return ADAM_POOL_KERNELS(baseline);
  }();
  return chosen;
}

}  // namespace

void MaxPoolForward(const PoolShape& s, const float* src, float* dst, int32_t* where) {
  Pick().max_forward(s, src, dst, where);
}
void MaxPoolBackward(const PoolShape& s, const float* diff_dst, const int32_t* where,
                     float* diff_src) {
  Pick().max_backward(s, diff_dst, where, diff_src);
}
void AvgPoolForward(const PoolShape& s, const float* src, float* dst) {
  Pick().avg_forward(s, src, dst);
}
void AvgPoolBackward(const PoolShape& s, const float* diff_dst, float* diff_src) {
  Pick().avg_backward(s, diff_dst, diff_src);
}
const char* PoolKernelIsa() { return Pick().isa; }

}  // namespace adam::model
