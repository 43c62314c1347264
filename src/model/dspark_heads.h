// DSpark's heads (docs/formats.md "DSpark drafter directory", docs/training.md "DSpark drafters"):
// the Markov logit-bias head, whose bias B_k = W2 b_k (b_k = e_k = W1[prev_k] for the vanilla
// head, sigmoid(Wg [h_k; e_k] + bg) * e_k for the gated one, tanh(o_k) for the rnn one, whose
// state s_k runs over a block's slots: [g | c | o] = J [s_{k-1}; e_k; h_k] + bJ, s_k =
// sigmoid(g) s_{k-1} + (1 - sigmoid(g)) tanh(c), s_{-1} = 0, the op pair markov_rnn_fwd/bwd)
// is added to the LM head's logits U_k = lm_head h_k, and the confidence head c_k = sigmoid(w [h_k;
// e_k] + b) (or of h_k alone). Training: the DSpark loss alpha_ce CE + alpha_l1 |q - p|_1 +
// alpha_conf BCE(c_k, c*_k) with c*_k = clamp(1 - |q - p|_1 / 2, 0, 1), through the existing
// chunked LM-head ops: the corrected logits are [h | b] . [lm_head | W2]^T, one LM head of D + r
// columns, so q never exists as a [R, V] tensor and the teacher's p comes from the target's final
// hidden states padded with r zeros. Decoding: the bias of one slot at a time, once its predecessor
// is chosen. Tested by tests/model/dspark_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_tensor.h"
#include "backend/workspace.h"
#include "model/hf_config.h"
#include "model/params.h"

namespace dflash {

// train.dspark_{ce,l1,confidence}_alpha: each term's weight (>= 0).
struct DsparkLossWeights {
    double ce = 0.1;
    double l1 = 0.9;
    double confidence = 1.0;
};

// The loss weight of DSpark slot k (0-based; it predicts token a + k + 1) of the block anchored at
// a: exp(-k / gamma) (1 when gamma <= 0) while tokens a + 1 .. a + k + 1 all lie inside the
// sequence and are trained (a contiguous prefix, as the reference's eval mask), else 0.
float dspark_slot_weight(int64_t anchor, int64_t k, std::span<const uint8_t> loss_mask,
                         double gamma);

// The heads' tensors of a drafter (values or gradients); empty where the config has none.
struct DsparkHeadWeights {
    Tensor w1, w2;          // markov_head.markov_w{1,2}.weight [V, r]
    Tensor gate_w, gate_b;  // gated: markov_head.gate_proj.{weight [r, D+r], bias [r]}
    // rnn: markov_head.joint_proj.{weight [3r, 2r+D], bias [3r]}
    Tensor joint_w, joint_b;
    Tensor conf_w, conf_b;  // confidence_head.proj.{weight [1, Dc], bias [1]}
};
DsparkHeadWeights dspark_head_weights(const ParamSet& p, const DsparkConfig& c);
DsparkHeadWeights dspark_head_grads(ParamSet& p, const DsparkConfig& c);

// The config.json key (and value) that makes a DSpark head tensor necessary, e.g.
// "markov_head_type \"rnn\"" for markov_head.joint_proj.weight; "" for other names. For the
// loaders' errors on a checkpoint that lacks one.
std::string dspark_tensor_key(const std::string& name);

// The heads' tensor names and shapes (drafter_tensor_specs appends them).
void append_dspark_specs(std::vector<TensorSpec>& out, const DsparkConfig& c, int64_t hidden,
                         int64_t vocab);

struct DsparkLossArgs {
    DsparkLossWeights alpha;
    Tensor hf;              // [R, D] final-normed block rows
    Tensor lm_head;         // [V, D] the target's, frozen
    Tensor labels;          // i32 [R]: token a + k + 1, -1 where the weight is 0
    Tensor weights;         // f32 [R]
    Tensor grad_weights;    // f32 [R]: weights x the gradient scale (empty: no gradient)
    Tensor prev;            // i32 [R]: the token before each slot's label (a + k)
    Tensor teacher_hidden;  // [S, D] the target's final-normed hidden states
    Tensor teacher_rows;    // i32 [R]: a + k
    int64_t chunk = 8192;
    int64_t period = 1;  // the block size (accuracy positions)
    // Evaluation outputs (optional, device), as BlockLossArgs': each row's argmax (i32 [R]) and
    // TV distance |q - p|_1 / 2 of the Markov-corrected q (f32 [R]; 0 where the weight is 0).
    Tensor argmax_out, tv_out;
    // With a confidence head (optional, device f32 [R]): each row's confidence logit z_k.
    Tensor conf_out;
};

// Adds the rows' weighted DSpark loss and per-slot accuracy into stats (LossStatsLayout{period});
// with gradients, writes dh [R, D] = d(loss)/dhf and accumulates the heads' parameter gradients
// into params. Everything runs on the device with nothing read back (the confidence term is the
// confidence_bce op, the gated head's derivative sigmoid_mul_bwd), so the step can be recorded.
void dspark_block_loss(Backend& be, Workspace& ws, ParamSet& params, const DsparkConfig& c,
                       const DsparkLossArgs& a, const Tensor& dh, const Tensor& stats);

// The per-slot head of decoding: adds slot k's Markov bias to its logits row once the token
// before it is known, and gives its confidence. The rnn head's state runs over a block's slots:
// apply is called for k = 0, 1, ... in order, k = 0 starting a block (s_{-1} = 0).
class DsparkSlotHead {
  public:
    // max_slots: the most slots of a block (the drafter's block size).
    DsparkSlotHead(Backend& be, const ParamSet& params, const DsparkConfig& c, int64_t hidden,
                   int64_t max_slots);
    // logits_row [1, V] (f32, device) += W2 b(h_row, prev); h_row [1, D] (device), slot k of
    // the block. Returns c_k (the confidence, sigmoid of the head's logit) when `confidence` and
    // the drafter has the head, else 1.
    double apply(int64_t k, const Tensor& h_row, int32_t prev, const Tensor& logits_row,
                 bool confidence);

  private:
    Backend& be_;
    DsparkConfig c_;
    int64_t D_;
    DsparkHeadWeights w_;
    int64_t max_slots_, next_slot_ = 0;
    DeviceTensor id_, e_, x_, gpre_, b_, z_, z32_;
    // rnn: the block's slots so far, [0 | e | h] rows, J's pre-activations, the recurrence's
    // act and b (the recurrence is re-run over slots 0..k at slot k: O(k) of r x 3r work).
    DeviceTensor rnn_z0_, rnn_pre_, rnn_act_, rnn_b_;
    HostTensor id_host_, z_host_;
};

}  // namespace dflash
