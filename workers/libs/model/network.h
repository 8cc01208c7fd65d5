// Network: one thread's context for running the model on oneDNN (Adam's per-thread "context").
//
// A Network owns the oneDNN primitives and every activation and gradient buffer for batches of
// exactly `batch` images; all are created in Create, so Forward and Backward allocate nothing.
// It reads weights from a caller-owned parameter vector and writes gradients into a caller-owned
// gradient vector (both ModelLayout::num_params() floats, at the layout's offsets). Several
// Networks may share one parameter vector and read it while others write it: that is the
// Hogwild design, and the only intended race. A Network itself is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/layout.h"

namespace adam::model {

// What Backward does.
enum class NetworkMode {
  kInference,  // no Backward
  kGradients,  // Backward writes the gradient of the batch's mean loss into a gradient vector
  kSgd,        // Backward(lr) applies params -= lr * gradient in place, without materialising the
               // dense layers' gradients (a fused oneDNN matmul with scale -lr and a sum post-op)
};

// How SetInputFromBytes scales a pixel byte p to the network's input: p * kPixelScale +
// kPixelShift, in [-1, 1]. The exported ONNX graph holds the same two constants (model/onnx.h).
inline constexpr float kPixelScale = 2.f / 255.f;
inline constexpr float kPixelShift = -1.f;

// kSgd's step (PyTorch's SGD): v = momentum * v + g + weight_decay * w for weights (biases
// are not decayed), w -= lr * v. With momentum the velocity v is a full pass over it and the
// weights per step; without, no velocity is kept: w = (1 - lr * weight_decay) * w - lr * g, the
// dense layers' decay folded into their fused update. Both 0 = plain SGD, w -= lr * g.
struct StepRule {
  float momentum = 0;
  float weight_decay = 0;
  // num_params zeroed floats holding the velocity, for Networks of one thread that take turns
  // (a batch's and a remainder's); null = the Network's own.
  float* velocity = nullptr;
  // Label smoothing s: the loss's target is 1 - s + s / classes for the image's class and
  // s / classes for every other (SmoothedTarget); 0 = one-hot. Applies in kGradients mode too.
  float label_smoothing = 0;
  bool plain() const { return momentum == 0 && weight_decay == 0; }
};

// The cross-entropy's target for class `c` of an image of class `label`, with label smoothing
// `s` over `classes` classes.
inline float SmoothedTarget(int c, int label, int classes, float s) {
  return (c == label ? 1.f - s : 0.f) + s / float(classes);
}

// -sum_c SmoothedTarget(c) * log p[c] for one image's `classes` probabilities (log clamped at
// 1e-30): with s = 0, -log p[label].
float SmoothedCrossEntropy(const float* p, int classes, int label, float s);

class Network {
 public:
  // `params` must outlive the Network; it is written only in kSgd mode. `grads` (num_params
  // floats) is required in kGradients mode and ignored otherwise. kSgd with `apply_every` k > 1:
  // Backward keeps each step's update in private buffers (the dense layers' input and scaled
  // error rows, the other parameters' summed steps) and ApplyPending writes them into the shared
  // parameters at once (one sgemm per dense layer), so the shared weights are written once per k
  // steps instead of every step; the caller calls ApplyPending when pending() reaches k. With
  // `hold` (and k = 1) the same for a caller that applies each step itself: pending_rows,
  // pending_steps, then ClearPending. A `rule` other than plain SGD needs every step applied at
  // once (apply_every 1, no hold): the velocity and the decay are applied where the step is.
  static StatusOr<std::unique_ptr<Network>> Create(const ModelLayout& layout, int batch,
                                                   float* params, float* grads, NetworkMode mode,
                                                   int apply_every = 1, bool hold = false,
                                                   StepRule rule = {});
  // A segment of a model, for model parallelism (model/partition.h): `layout`'s layers with no
  // loss head (its last layer is not softmax). Forward leaves the last layer's output in output()
  // and returns 0; Backward starts from what the caller wrote into output_gradient(). With
  // `input_gradient` Backward also writes the gradient with respect to the input into
  // input_gradient() (needs a mode other than kInference). kSgd and kGradients otherwise as in
  // Create (no apply_every or hold).
  static StatusOr<std::unique_ptr<Network>> CreateSegment(const ModelLayout& layout, int batch,
                                                          float* params, float* grads,
                                                          NetworkMode mode, bool input_gradient,
                                                          StepRule rule = {});
  ~Network();

  // A segment's last layer's output (batch x its output size, NCHW), valid after Forward; the
  // gradient of the loss with respect to it, which the caller fills before Backward (null in
  // kInference mode); the gradient with respect to input(), valid after Backward (null without
  // input_gradient). All null for a whole model.
  const float* output() const;
  float* output_gradient();
  const float* input_gradient() const;

  int batch() const;
  // batch x input_size floats, NCHW; the caller fills it before Forward.
  float* input();
  // Fills input() from `batch` images of input_size bytes each, scaled to [-1, 1].
  void SetInputFromBytes(const uint8_t* pixels);

  // Runs the forward pass. Dropout layers draw new masks each time in kSgd mode, keep the same
  // masks in kGradients mode, and are left out in kInference mode. `labels` (batch entries,
  // < classes) may be null for inference. Returns
  // the summed cross-entropy loss over the batch (against the StepRule's smoothed targets; 0
  // without labels) and writes each image's
  // argmax class to `predicted` when it is not null.
  float Forward(const uint8_t* labels, int* predicted);

  // After Forward with labels. kGradients: writes the gradient of the batch's mean loss with
  // respect to every parameter into the gradient vector (lr unused). kSgd: takes one step of the
  // StepRule on the parameters (plain SGD: subtracts lr times that gradient), with no lock
  // (Hogwild).
  void Backward(float lr = 0.f);
  // Backward in two halves, for a model worker that sends a gradient to its peers while it
  // computes on (model/partition.h): BackwardData leaves the gradient with respect to each layer's
  // input, input_gradient() included; BackwardWeights(lr) then does the rest (the weight gradients
  // and the step). The two in turn do what Backward(lr) does. Not with apply_every > 1 or hold.
  void BackwardData();
  void BackwardWeights(float lr = 0.f);

  // batch x classes probabilities of the last Forward.
  const float* probabilities() const;

  // A dense (or softmax) layer's input activations (batch x in) and the gradient of the batch's
  // mean loss at its output, before its activation function (batch x units): valid after
  // Backward until the next Forward, in kSgd and kGradients modes. The layer's weight gradient is
  // diff_dst^T x src. All null for other layers and in kInference mode.
  struct DenseIo {
    const float* src = nullptr;
    const float* diff_dst = nullptr;
    int64_t in = 0;
    int64_t units = 0;
  };
  DenseIo dense_io(int layer) const;

  // apply_every > 1 or hold: steps whose updates are held back, and a dense layer's held rows: its
  // inputs (rows x in) and errors already scaled by -lr (rows x units), rows = pending() x batch.
  int pending() const;
  struct PendingRows {
    const float* a = nullptr;
    const float* e = nullptr;
    int64_t rows = 0;
    int64_t in = 0;
    int64_t units = 0;
  };
  PendingRows pending_rows(int layer) const;
  // Writes the held updates into the shared parameters (no lock: Hogwild) and clears them.
  void ApplyPending();
  // The held updates of the parameters outside dense layers: the ranges (conv weights and
  // biases, in layer order) and their summed lr * gradient, laid end to end (ApplyPending
  // subtracts them). ClearPending forgets every held update: the caller has applied them itself.
  const std::vector<ParamRange>& looped_ranges() const;
  const float* pending_steps() const;
  void ClearPending();

 private:
  struct Impl;
  struct Builder;
  struct Options;
  static StatusOr<std::unique_ptr<Network>> Build(const ModelLayout& layout, const Options& o);
  explicit Network(std::unique_ptr<Impl> impl);
  void StepWithVelocity(float lr);  // Backward's step when the StepRule is not plain SGD
  enum class Pass { kAll, kData, kWeights };
  void RunBackward(float lr, Pass pass);
  void PrepareBackwardData();
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::model
