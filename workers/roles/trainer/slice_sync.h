// SliceSync: the weights one process trains against the parameter servers: a whole replica's, or
// a split replica's model worker's slice (split_replica.h). It keeps what the last pull brought
// (w0). A push sends what the weights moved since; a pull brings the global weights and moves the
// process's weights by what changed globally, keeping what its threads added while the push and
// pull were in flight (w += pulled - snapshot). With the significantly-modified filter or 16-bit
// values (spec.training.communication) it also keeps, per entry, what is still owed to the
// servers, so nothing skipped or rounded is lost.
//
// Not thread-safe: one caller at a time (the trainer's sync thread, a model worker's control
// lane); the weights themselves are read and changed through the caller's functions while its
// training threads keep going (Hogwild).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/status.h"
#include "spec/adamjob.h"
#include "trainer/ps_client.h"

namespace adam::trainer {

class SliceSync {
 public:
  // `ps` moves exactly these weights (n floats: the whole vector, or its slice); `initial` holds
  // them as last pulled. The filter runs over `spans` (the ranges that travel as weight deltas).
  SliceSync(ParamServerClient* ps, std::vector<float> initial,
            const spec::CommunicationSpec& communication,
            std::vector<std::pair<int64_t, int64_t>> spans);

  // Reads the weights into the snapshot through `read` and pushes snapshot - w0 (what the filter
  // lets through) with `dense` at `clock`. Returns the entries the filter held back.
  StatusOr<int64_t> Push(const std::function<Status(float*)>& read, std::vector<DenseBatch> dense,
                         uint64_t clock);
  // Pulls the weights once `clock` allows, hands pulled - snapshot to `add`, and keeps the pull
  // as w0.
  Status Pull(const std::function<Status(const float*)>& add, uint64_t clock);

  // The weights as last pulled.
  const std::vector<float>& w0() const { return w0_; }
  ParamServerClient* client() const { return ps_; }

 private:
  ParamServerClient* const ps_;
  const spec::CommunicationSpec communication_;
  const std::vector<std::pair<int64_t, int64_t>> spans_;
  std::vector<float> w0_, snapshot_, delta_, pulled_;
  // With the filter or float16: what each entry owes, and what this push sends.
  std::vector<float> pending_, sent_;
};

}  // namespace adam::trainer
