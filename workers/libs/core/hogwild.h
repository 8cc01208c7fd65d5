// Hogwild: the one data race Adam intends. Trainer worker threads update the replica's shared
// weights without locks while other workers read them and the sync thread copies them; a torn
// or lost float costs a little accuracy, never correctness of anything else.
//
// HogwildScope marks a block that touches the shared weights: under ThreadSanitizer the calling
// thread's reads and writes inside it are ignored (the dynamic-annotation API), so every other
// race in the process is still reported; in normal builds it is nothing. Keep the blocks to the
// weight loops themselves.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define ADAM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ADAM_TSAN 1
#endif
#endif

#ifdef ADAM_TSAN
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

namespace adam {

class HogwildScope {
 public:
#ifdef ADAM_TSAN
  HogwildScope() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~HogwildScope() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  HogwildScope() {}  // user-provided: no unused-variable warning where it is used as a guard
  ~HogwildScope() {}
#endif
  HogwildScope(const HogwildScope&) = delete;
  HogwildScope& operator=(const HogwildScope&) = delete;
};

}  // namespace adam
