// The inside of a Network, shared by network_build.cc (making its steps) and network.cc (running
// them). Not a public header.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "model/network.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace adam::model {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;
using dt = memory::data_type;
using Args = std::unordered_map<int, memory>;

struct Step {
  dnnl::primitive prim;
  Args args;
  int decayed = -1;      // a dense layer's fused update whose sum scale follows the rate: its index
  bool weights = false;  // on the way to a weight gradient or step, not to an input gradient
  std::function<void()> run = {};  // a step of our own instead of a primitive (pooling)
};

// oneDNN's CPU stream (its OpenMP runtime) has run a primitive when execute returns, so a step of
// our own between two primitives reads the first's output and the second reads its own.
void Execute(Step& s, dnnl::stream& strm);

// The fused dense update W = sum_scale * W + (-lr) * diff_dst^T x src (diff_dst given as
// units x batch through strides, see Create), with -lr a runtime output scale.
dnnl::matmul FusedUpdate(const memory::desc& a_md, const memory::desc& src_md,
                         const memory::desc& w_md, float sum_scale, const dnnl::engine& eng);

struct Network::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  int batch = 0;
  int classes = 0;
  int64_t input_size = 0;
  memory input;
  memory logits, probs, diff_logits;
  std::vector<Step> forward, backward;
  NetworkMode mode = NetworkMode::kInference;
  // kSgd: the small parameters (conv weights, every bias) go through this private gradient
  // buffer and are updated by a loop; dense weights are updated by fused matmuls.
  std::vector<float> own_grads;
  float* params = nullptr;
  float* grads = nullptr;
  std::vector<ParamRange> looped_updates;
  // A StepRule other than plain SGD: the dense layers' fused matmuls write momentum * v + g into
  // the velocity instead of the weights, and Backward takes the step over every range.
  StepRule rule;
  float label_smoothing = 0;                           // the rule's, in every mode with labels
  std::vector<float> own_velocity;                     // when the StepRule brings none
  float* velocity = nullptr;                           // num_params floats, or null for plain SGD
  std::vector<ParamRange> weight_ranges, bias_ranges;  // every layer's
  // Weight decay with no momentum needs no velocity: each step is w = (1 - lr * wd) * w - lr * g,
  // the dense layers' as their fused matmul with that sum scale, rebuilt when the rate changes.
  struct DecayedMatmul {
    memory::desc a, src, w;
  };
  std::vector<DecayedMatmul> decayed;
  std::vector<size_t> decayed_steps;   // their indices in `backward`
  float decay_scale = 1;               // the sum scale they were built with
  std::vector<bool> looped_is_weight;  // per looped range: decayed (a weight) or not (a bias)
  memory neg_lr;                       // one f32: the runtime output scale of the fused updates
  struct DenseBias {
    memory diff_dst;  // batch x units
    int64_t offset;   // of the bias in params
    int units;
  };
  std::vector<DenseBias> dense_bias;
  std::vector<Network::DenseIo> dense_io;  // per layer
  // apply_every > 1 or hold: held-back updates.
  int apply_every = 1;
  bool hold = false;
  int pending = 0;
  struct Held {
    int layer;
    int64_t in, units, weights, bias;  // offsets in params
    std::vector<float> a, e;           // apply_every*batch rows each
  };
  std::vector<Held> held;                              // dense layers
  std::vector<int> held_index;                         // per layer: index into held, or -1
  std::vector<float> held_steps;                       // sum of lr * grad over the looped ranges
  std::vector<std::unique_ptr<int32_t[]>> pool_where;  // each max pool's argmax positions
  // Dropout while training (inverted: a kept input is scaled by 1 / keep, so evaluation, which
  // leaves the layer out, needs no scaling): each layer's mask, drawn before every Forward in
  // kSgd mode and the same on every Forward in kGradients mode (one fixed function to check).
  struct Dropout {
    memory mask;
    float keep;
  };
  std::vector<Dropout> dropouts;
  uint64_t rng = 0;  // splitmix64 state
  // One scratchpad for every primitive of this Network: oneDNN's library-managed scratchpad is
  // thread-local and sized at creation, so a Network made on one thread and run on another
  // needs its own.
  memory scratchpad;
  std::vector<uint8_t> labels;
  // A segment (CreateSegment): no loss head; its output and the gradients at its two ends, in
  // plain layouts.
  bool segment = false;
  memory output, output_grad, input_grad;

  // Backward's parts (network.cc). A new learning rate's decay in the dense layers' fused
  // updates (plain SGD: they scale the weights themselves).
  void SetDecayScale(float scale);
  // applyEvery > 1: this step's update held back in the private buffers, not applied.
  void HoldStep(float lr);
  // Plain SGD: the looped parameters and the dense biases stepped in place (Hogwild).
  void StepInPlace(float lr, float decay_scale);
};

}  // namespace adam::model
