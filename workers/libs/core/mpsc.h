// MpscStack: a lock-free multi-producer, single-consumer hand-off of intrusive nodes.
//
// Producers Push nodes with one compare-and-swap on the head; the consumer takes everything at
// once with one exchange and gets it back in push order (TakeAll reverses the list). No ABA
// problem: the consumer never pops single nodes. T needs a `T* next` member that the queue owns
// between Push and TakeAll. Thread-safe for any number of producers and one consumer.
#pragma once

#include <atomic>

namespace adam {

template <typename T>
class MpscStack {
 public:
  void Push(T* node) {
    T* head = head_.load(std::memory_order_relaxed);
    do {
      node->next = head;
    } while (!head_.compare_exchange_weak(head, node, std::memory_order_release,
                                          std::memory_order_relaxed));
  }

  // Everything pushed so far, oldest first (nullptr when empty).
  T* TakeAll() {
    T* n = head_.exchange(nullptr, std::memory_order_acquire);
    T* fifo = nullptr;
    while (n != nullptr) {
      T* next = n->next;
      n->next = fifo;
      fifo = n;
      n = next;
    }
    return fifo;
  }

  bool empty() const { return head_.load(std::memory_order_relaxed) == nullptr; }

 private:
  // Push publishes a node (and what its producer wrote into it) with release; TakeAll's acquire
  // exchange makes that visible to the consumer. empty() is a hint: relaxed.
  std::atomic<T*> head_{nullptr};
};

}  // namespace adam
