// DSpark's Markov and confidence heads: training loss and per-slot decoding (see dspark_heads.h).
// Tested by tests/model/dspark_test.cpp.
#include "model/dspark_heads.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dflash {
namespace {

constexpr const char* kW1 = "markov_head.markov_w1.weight";
constexpr const char* kW2 = "markov_head.markov_w2.weight";
constexpr const char* kGateW = "markov_head.gate_proj.weight";
constexpr const char* kGateB = "markov_head.gate_proj.bias";
constexpr const char* kJointW = "markov_head.joint_proj.weight";
constexpr const char* kJointB = "markov_head.joint_proj.bias";
constexpr const char* kConfW = "confidence_head.proj.weight";
constexpr const char* kConfB = "confidence_head.proj.bias";

bool gated(const DsparkConfig& c) {
    return c.markov_head == MarkovHeadType::gated;
}
bool rnn(const DsparkConfig& c) {
    return c.markov_head == MarkovHeadType::rnn;
}

template <class Get>
DsparkHeadWeights head_tensors(const DsparkConfig& c, Get get) {
    DsparkHeadWeights w;
    w.w1 = get(kW1);
    w.w2 = get(kW2);
    if (gated(c)) {
        w.gate_w = get(kGateW);
        w.gate_b = get(kGateB);
    }
    if (rnn(c)) {
        w.joint_w = get(kJointW);
        w.joint_b = get(kJointB);
    }
    if (c.confidence_head) {
        w.conf_w = get(kConfW);
        w.conf_b = get(kConfB);
    }
    return w;
}

double sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

// dst [M, C] = src[:, col : col + C] for src [M, W] (same dtype): a gather of the chunks of
// gcd(W, col, C) elements that make up those columns, with src viewed as a table of such chunks
// (an embedding lookup; no op copies columns out). `ids` are staged per call.
void take_columns(Backend& be, Workspace& ws, const Tensor& src, int64_t col, const Tensor& dst) {
    const int64_t M = src.dim(0), W = src.dim(1), C = dst.dim(1);
    DF_ASSERT(dst.dim(0) == M && col >= 0 && col + C <= W, "take_columns [{}, {}] from {} + {}", M,
              C, W, col);
    const int64_t g = std::gcd(std::gcd(W, col), C);
    const int64_t per_row = C / g;
    Workspace::Staged ids = ws.input({M * per_row}, DType::i32);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < per_row; ++j)
            ids.host.i32()[m * per_row + j] = static_cast<int32_t>((m * W + col) / g + j);
    ws.send_inputs();
    be.embedding_fwd(src.reshape({M * W / g, g}), ids.device, dst.reshape({M * per_row, g}));
}

// dst [M, D + r] = [a | b].
void concat_columns(Backend& be, const Tensor& a, const Tensor& b, const Tensor& dst) {
    be.copy_columns(dst, 0, a);
    be.copy_columns(dst, a.dim(1), b);
}

// y [M, C] += src[:, col : col + C].
void add_columns(Backend& be, Workspace& ws, const Tensor& src, int64_t col, const Tensor& y) {
    const Tensor t = ws.take(y.shape(), src.dtype());
    take_columns(be, ws, src, col, t);
    be.add_inplace(y, t);
}

// The rnn head's forward over R rows in blocks of `period` slots (recipe spec §1.2):
// z = [s_{k-1} | e | h], J z + bJ split gate | candidate | output, b = tanh(output). The gemm
// takes J's e and h columns with the state's columns zeroed in z0 (the recurrence, which needs
// the state's columns, is markov_rnn_fwd); z0 [R, 2r + D] is kept for the backward.
struct RnnForward {
    Tensor z0, act, b;
};
RnnForward rnn_forward(Backend& be, Workspace& ws, const DsparkHeadWeights& w, const Tensor& h,
                       const Tensor& e, int64_t period) {
    const int64_t R = h.dim(0), D = h.dim(1), r = e.dim(1);
    const DType act = h.dtype();
    RnnForward f;
    f.z0 = ws.take({R, 2 * r + D}, act);
    be.fill(f.z0, 0.0f);
    be.copy_columns(f.z0, r, e);
    be.copy_columns(f.z0, 2 * r, h);
    const Tensor pre = ws.take({R, 3 * r}, act);
    be.gemm(f.z0, false, w.joint_w, true, pre);
    f.act = ws.take({R, 3 * r}, DType::f32);
    f.b = ws.take({R, r}, act);
    be.markov_rnn_fwd(pre, w.joint_b, w.joint_w, period, f.act, f.b);
    return f;
}

// Its backward from db = d(loss)/db [R, r]: J's and bJ's gradients accumulated into g, e's and
// h's added into de and dh. z0 becomes z (the state columns filled in).
void rnn_backward(Backend& be, Workspace& ws, const DsparkHeadWeights& w,
                  const DsparkHeadWeights& g, const RnnForward& f, const Tensor& db, int64_t period,
                  const Tensor& de, const Tensor& dh) {
    const int64_t R = db.dim(0), r = db.dim(1);
    const DType act = db.dtype();
    const Tensor dact = ws.take({R, 3 * r}, act);
    const Tensor s_prev = ws.take({R, r}, act);
    be.markov_rnn_bwd(db, f.act, w.joint_w, period, dact, g.joint_b, s_prev);
    be.copy_columns(f.z0, 0, s_prev);
    be.gemm(dact, true, f.z0, false, g.joint_w, 1.0f, 1.0f);
    const Tensor dz = ws.take(f.z0.shape(), act);
    be.gemm(dact, false, w.joint_w, false, dz);
    add_columns(be, ws, dz, r, de);
    add_columns(be, ws, dz, 2 * r, dh);
}

}  // namespace

float dspark_slot_weight(int64_t anchor, int64_t k, std::span<const uint8_t> loss_mask,
                         double gamma) {
    const auto S = static_cast<int64_t>(loss_mask.size());
    for (int64_t i = 0; i <= k; ++i) {
        const int64_t p = anchor + i + 1;
        if (p >= S || !loss_mask[p]) return 0.0f;
    }
    if (gamma <= 0) return 1.0f;
    return static_cast<float>(std::exp(-static_cast<double>(k) / gamma));
}

DsparkHeadWeights dspark_head_weights(const ParamSet& p, const DsparkConfig& c) {
    return head_tensors(c, [&](const char* n) { return p.value(n); });
}

DsparkHeadWeights dspark_head_grads(ParamSet& p, const DsparkConfig& c) {
    return head_tensors(c, [&](const char* n) { return p.grad(n); });
}

std::string dspark_tensor_key(const std::string& name) {
    if (name == kW1 || name == kW2) return "markov_rank";
    if (name == kGateW || name == kGateB) return "markov_head_type \"gated\"";
    if (name == kJointW || name == kJointB) return "markov_head_type \"rnn\"";
    if (name == kConfW || name == kConfB) return "enable_confidence_head true";
    return "";
}

void append_dspark_specs(std::vector<TensorSpec>& out, const DsparkConfig& c, int64_t hidden,
                         int64_t vocab) {
    const int64_t r = c.markov_rank;
    out.push_back({kW1, {vocab, r}});
    out.push_back({kW2, {vocab, r}});
    if (gated(c)) {
        out.push_back({kGateW, {r, hidden + r}});
        out.push_back({kGateB, {r}});
    }
    if (rnn(c)) {
        out.push_back({kJointW, {3 * r, 2 * r + hidden}});
        out.push_back({kJointB, {3 * r}});
    }
    if (c.confidence_head) {
        out.push_back({kConfW, {1, c.confidence_dim(hidden)}});
        out.push_back({kConfB, {1}});
    }
}

void dspark_block_loss(Backend& be, Workspace& ws, ParamSet& params, const DsparkConfig& c,
                       const DsparkLossArgs& a, const Tensor& dh, const Tensor& stats) {
    const int64_t R = a.hf.dim(0), D = a.hf.dim(1), V = a.lm_head.dim(0), r = c.markov_rank;
    const int64_t W = D + r;
    const DType act = a.hf.dtype();
    const bool grads = !dh.empty();
    const DsparkHeadWeights w = dspark_head_weights(params, c);
    DF_CHECK(!a.teacher_hidden.empty() && a.teacher_rows.numel() == R,
             "the DSpark loss needs the target's final hidden states and one teacher row per slot");

    // ---- forward: the bias input b, [h | b] and the combined head [lm_head | W2].
    const Tensor e = ws.take({R, r}, act);
    be.embedding_fwd(w.w1, a.prev, e);
    Tensor b = e, xg, gpre;
    RnnForward rf;
    if (rnn(c)) {
        DF_CHECK(a.period >= 1 && R % a.period == 0,
                 "the rnn Markov head needs whole blocks of rows ({} rows, block size {})", R,
                 a.period);
        rf = rnn_forward(be, ws, w, a.hf, e, a.period);
        b = rf.b;
    } else if (gated(c)) {
        xg = ws.take({R, W}, act);
        concat_columns(be, a.hf, e, xg);
        gpre = ws.take({R, r}, act);
        be.gemm(xg, false, w.gate_w, true, gpre);
        be.add_row_bias(gpre, w.gate_b);
        b = ws.take({R, r}, act);
        be.sigmoid_mul(e, gpre, b);
    }
    const Tensor xb = ws.take({R, W}, act);
    concat_columns(be, a.hf, b, xb);
    const Tensor head = ws.take({V, W}, act);
    concat_columns(be, a.lm_head, w.w2, head);
    // The teacher's rows padded with zeros: [H | 0] . [lm_head | W2]^T = the target's logits.
    const Tensor th = ws.take({R, D}, act);
    be.embedding_fwd(a.teacher_hidden, a.teacher_rows, th);
    const Tensor tp = ws.take({R, W}, act);
    be.fill(tp, 0.0f);
    be.copy_columns(tp, 0, th);

    const bool prescaled = grads;
    const Tensor& op_w = prescaled ? a.grad_weights : a.weights;
    const Tensor dhead = grads ? ws.take({V, W}, DType::f32) : Tensor();
    if (grads) be.fill(dhead, 0.0f);
    const Tensor dxb = grads ? ws.take({R, W}, act) : Tensor();
    const Tensor loss_rows = ws.take({R}, DType::f32);
    const Tensor argmax = ws.take({R}, DType::i32);
    be.fill(loss_rows, 0.0f);
    // CE on the data's next tokens (weight alpha_ce).
    if (a.alpha.ce > 0) {
        LmHeadCeOut out;
        out.loss_rows = ws.take({R}, DType::f32);
        out.dh = dxb;
        out.dw = dhead;
        out.workspace = ws.take({be.lm_head_ce_workspace(R, W, V, a.chunk)}, DType::f32);
        be.lm_head_ce(xb, head, a.labels, op_w, static_cast<float>(a.alpha.ce), a.chunk, out);
        be.add_inplace(loss_rows, out.loss_rows, static_cast<float>(a.alpha.ce));
    }
    // |q - p|_1 = 2 TV: its per-row TV is also the confidence target's input, so it is computed
    // even at alpha_l1 = 0 (then without a gradient).
    const Tensor tv = ws.take({R}, DType::f32);
    {
        LmHeadDivergences div;
        div.kl = 0.0f;
        div.tv = 1.0f;
        LmHeadKlOut out;
        out.loss_rows = tv;
        out.argmax = argmax;
        const bool l1_grad = grads && a.alpha.l1 > 0;
        const Tensor dxk = l1_grad ? ws.take({R, W}, act) : Tensor();
        out.dh = dxk;
        out.dw = l1_grad ? dhead : Tensor();
        out.workspace = ws.take({be.lm_head_kl_workspace(R, W, V, a.chunk)}, DType::f32);
        // The rows' loss is computed with the unscaled weights' support either way.
        be.lm_head_kl(xb, tp, head, op_w, static_cast<float>(2.0 * a.alpha.l1), a.chunk, div, out);
        be.add_inplace(loss_rows, tv, static_cast<float>(2.0 * a.alpha.l1));
        if (grads) {
            if (a.alpha.ce > 0 && l1_grad) {
                be.add_inplace(dxb, dxk);
            } else if (l1_grad) {
                be.copy(dxb, dxk);
            } else if (a.alpha.ce <= 0) {
                be.fill(dxb, 0.0f);
            }
        }
    }
    // The gradient of [h | b]: dh and db.
    const Tensor db = grads ? ws.take({R, r}, act) : Tensor();
    const Tensor de = grads ? ws.take({R, r}, act) : Tensor();
    if (grads) {
        take_columns(be, ws, dxb, 0, dh);
        take_columns(be, ws, dxb, D, db);
    }

    // ---- confidence head: z = w . xc + b, BCE against c* = clamp(1 - TV, 0, 1) (the
    // confidence_bce op: on the device, so the step can be recorded).
    const bool conf = c.confidence_head;
    Tensor xc;
    if (conf) {
        const int64_t Dc = c.confidence_dim(D);
        if (!c.confidence_with_markov) {
            xc = a.hf;
        } else if (gated(c)) {
            xc = xg;
        } else if (rnn(c)) {
            xc = ws.take({R, W}, act);
            concat_columns(be, a.hf, e, xc);
        } else {
            xc = xb;  // [h | e] = [h | b] for the vanilla head
        }
        DF_ASSERT(xc.dim(1) == Dc);
        const Tensor z = ws.take({R, 1}, act);
        be.gemm(xc, false, w.conf_w, true, z);
        be.add_row_bias(z, w.conf_b);
        if (!a.conf_out.empty()) be.copy(a.conf_out, z);
        const DsparkHeadWeights g = grads ? dspark_head_grads(params, c) : DsparkHeadWeights{};
        const Tensor dz = grads ? ws.take({R, 1}, act) : Tensor();
        be.confidence_bce(z, tv, a.weights, grads ? a.grad_weights : Tensor(),
                          static_cast<float>(a.alpha.confidence), loss_rows, dz, g.conf_b);
        if (grads) {
            be.gemm(dz, true, xc, false, g.conf_w, 1.0f, 1.0f);
            const Tensor dxc = ws.take({R, xc.dim(1)}, act);
            be.gemm(dz, false, w.conf_w, false, dxc);
            add_columns(be, ws, dxc, 0, dh);
            if (c.confidence_with_markov) {
                take_columns(be, ws, dxc, D, de);
            } else {
                be.fill(de, 0.0f);
            }
        }
    } else if (grads) {
        be.fill(de, 0.0f);
    }
    be.loss_stats(loss_rows, argmax, a.labels, a.weights, a.period, stats);
    if (!a.argmax_out.empty()) be.copy(a.argmax_out, argmax);
    if (!a.tv_out.empty()) be.copy(a.tv_out, tv);
    if (!grads) return;

    // ---- the Markov head's backward: de (direct path), the gate, W1 and W2.
    const DsparkHeadWeights g = dspark_head_grads(params, c);
    if (rnn(c)) {
        rnn_backward(be, ws, w, g, rf, db, a.period, de, dh);
    } else if (!gated(c)) {
        be.add_inplace(de, db);
    } else {
        // b = e * sigmoid(gpre): de += db * s, dgpre = db * e * s (1 - s), the bias's gradient
        // the column sums of dgpre.
        const Tensor dgd = ws.take({R, r}, act);
        be.sigmoid_mul_bwd(db, e, gpre, de, dgd, g.gate_b);
        be.gemm(dgd, true, xg, false, g.gate_w, 1.0f, 1.0f);
        const Tensor dxg = ws.take({R, W}, act);
        be.gemm(dgd, false, w.gate_w, false, dxg);
        add_columns(be, ws, dxg, 0, dh);
        add_columns(be, ws, dxg, D, de);
    }
    be.embedding_bwd(a.prev, de, g.w1);
    // W2's gradient: the last r columns of the combined head's, a chunk of rows at a time (the
    // gather runs in the compute dtype).
    const int64_t rows = std::min<int64_t>(V, std::max<int64_t>(a.chunk, 1));
    const Tensor cast = act == DType::f32 ? Tensor() : ws.take({rows, W}, act);
    const Tensor part = ws.take({rows, r}, act);
    for (int64_t v0 = 0; v0 < V; v0 += rows) {
        const int64_t n = std::min(rows, V - v0);
        Tensor src = dhead.rows(v0, v0 + n);
        if (!cast.empty()) {
            be.copy(cast.rows(0, n), src);
            src = cast.rows(0, n);
        }
        take_columns(be, ws, src, D, part.rows(0, n));
        be.add_inplace(g.w2.rows(v0, v0 + n), part.rows(0, n));
    }
}

DsparkSlotHead::DsparkSlotHead(Backend& be, const ParamSet& params, const DsparkConfig& c,
                               int64_t hidden, int64_t max_slots)
    : be_(be),
      c_(c),
      D_(hidden),
      w_(dspark_head_weights(params, c)),
      max_slots_(max_slots),
      id_(be, {1}, DType::i32),
      e_(be, {1, c.markov_rank}, be.compute_dtype()),
      x_(be, {1, hidden + c.markov_rank}, be.compute_dtype()),
      gpre_(be, {1, c.markov_rank}, be.compute_dtype()),
      b_(be, {1, c.markov_rank}, be.compute_dtype()),
      z_(be, {1, 1}, be.compute_dtype()),
      z32_(be, {1, 1}, DType::f32),
      id_host_({1}, DType::i32),
      z_host_({1, 1}) {
    DF_CHECK(max_slots >= 1, "DsparkSlotHead: max_slots={} (expected >= 1)", max_slots);
    if (rnn(c)) {
        const int64_t r = c.markov_rank;
        rnn_z0_ = DeviceTensor(be, {max_slots, 2 * r + hidden}, be.compute_dtype());
        rnn_pre_ = DeviceTensor(be, {max_slots, 3 * r}, be.compute_dtype());
        rnn_act_ = DeviceTensor(be, {max_slots, 3 * r}, DType::f32);
        rnn_b_ = DeviceTensor(be, {max_slots, r}, be.compute_dtype());
        // The state's columns of z0 stay 0: markov_rnn_fwd adds J's state part itself.
        be.fill(rnn_z0_, 0.0f);
    }
}

double DsparkSlotHead::apply(int64_t k, const Tensor& h_row, int32_t prev, const Tensor& logits_row,
                             bool confidence) {
    DF_CHECK(k >= 0 && k < max_slots_ && (k == 0 || k == next_slot_),
             "DsparkSlotHead::apply: slot {} after slot {} (slots run 0, 1, ... below {})", k,
             next_slot_ - 1, max_slots_);
    next_slot_ = k + 1;
    id_host_.i32()[0] = prev;
    be_.upload(id_, id_host_.view());
    be_.embedding_fwd(w_.w1, id_, e_);
    const bool need_x =
        gated(c_) || (confidence && c_.confidence_head && c_.confidence_with_markov);
    if (need_x) {
        be_.copy_columns(x_, 0, h_row);
        be_.copy_columns(x_, D_, e_);
    }
    Tensor b = e_;
    if (rnn(c_)) {
        const int64_t r = c_.markov_rank;
        const Tensor z0 = rnn_z0_.view().rows(k, k + 1);
        be_.copy_columns(z0, r, e_);
        be_.copy_columns(z0, 2 * r, h_row);
        be_.gemm(z0, false, w_.joint_w, true, rnn_pre_.view().rows(k, k + 1));
        // Slots 0..k as one block: the state of slot k - 1 from the same rows as before.
        be_.markov_rnn_fwd(rnn_pre_.view().rows(0, k + 1), w_.joint_b, w_.joint_w, k + 1,
                           rnn_act_.view().rows(0, k + 1), rnn_b_.view().rows(0, k + 1));
        b = rnn_b_.view().rows(k, k + 1);
    } else if (gated(c_)) {
        be_.gemm(x_, false, w_.gate_w, true, gpre_);
        be_.add_row_bias(gpre_, w_.gate_b);
        be_.sigmoid_mul(e_, gpre_, b_);
        b = b_;
    }
    be_.gemm(b, false, w_.w2, true, logits_row, 1.0f, 1.0f);
    if (!confidence || !c_.confidence_head) return 1.0;
    be_.gemm(c_.confidence_with_markov ? x_.view() : h_row, false, w_.conf_w, true, z_);
    be_.add_row_bias(z_, w_.conf_b);
    be_.copy(z32_, z_);
    be_.download(z_host_.view(), z32_);
    return sigmoid(z_host_.f32()[0]);
}

}  // namespace dflash
