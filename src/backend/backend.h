// Backend: one device's memory, ordering and op set (docs/design.md "The op contract"). Model,
// training and decoding code is written once against it and never dereferences activation memory on
// the host: it uploads a step's inputs once and downloads its small outputs once
// (backend/workspace.h). Implementations: the CPU reference (backend/cpu, fp32, runs immediately),
// CUDA (backend/cuda, bf16 storage, fp32 accumulation, ordered on the device's stream) and the
// planning backend (no work at all: it sizes workspaces). All tensors are row-major and contiguous;
// shapes are in the comments and checked by each op; a tensor of another device is an error naming
// it. Tested through the CPU backend by tests/ops/*_test.cpp and every model test; the CUDA backend
// against the CPU one by tests/cuda/*_test.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/device_tensor.h"
#include "backend/ops.h"
#include "backend/step_graph.h"
#include "core/tensor.h"

namespace dflash {

class Communicator;

// Collectives over the workers of a run done by the devices themselves
// (Backend::make_device_collectives): NCCL on CUDA. Every op is queued on the backend's stream
// like any other (it may be recorded in a step) and works in place on f32 tensors; every worker
// of the run must call the same ops with the same sizes in the same order.
class DeviceCollectives {
  public:
    virtual ~DeviceCollectives() = default;
    // Every worker ends with the element-wise sum.
    virtual void sum(const Tensor& t) = 0;
    // t [world * chunk]: afterwards worker r's chunk [r * chunk, (r + 1) * chunk) holds the sum
    // of every worker's chunk r; the rest of t is unspecified.
    virtual void reduce_scatter(const Tensor& t, int64_t chunk) = 0;
    // t [world * chunk]: every worker ends with worker r's chunk r at [r * chunk, (r + 1) * chunk).
    virtual void all_gather(const Tensor& t, int64_t chunk) = 0;
    // sum(t) on a stream of the collectives' own, after the work queued so far on the backend's
    // stream: the backend's later work runs beside it (a backward pass beside the sum of the
    // gradients it has finished) until join(), after which the backend's stream waits for
    // every overlapped sum. Sums run in the order they were queued, like every other op.
    virtual void sum_overlapped(const Tensor& t) = 0;
    virtual void join() = 0;
    // From any thread: this worker's device stops waiting for its peers. The wait in progress,
    // or the next one, fails with `reason` after aborting the collectives (a failed worker must
    // not leave the others hanging, docs/design.md "Errors").
    virtual void abort(const std::string& reason) = 0;
    // From the driving thread, when it gives up on its own (its step failed): stops every
    // collective queued or running now, so that no wait on the device during the clean-up is
    // left waiting for peers; later ops fail.
    virtual void stop() = 0;
    virtual std::string describe() const = 0;  // "NCCL 2.28.9, 2 ranks"
};

// How a backend's device collectives are made (runtime.nccl_library,
// runtime.collective_timeout_s).
struct CollectiveOptions {
    std::string library;
    // The longest a host wait on the device may take while collectives are in flight (their
    // set-up included) before they are aborted and the wait fails naming the cause.
    double timeout_s = 600;
};

// A backend's own copy of a linear layer's weight, made by Backend::prepare_bf16_weight for
// Backend::linear. It holds the weight's values as they were when it was made.
class PreparedWeight {
  public:
    virtual ~PreparedWeight() = default;
};

class Backend {
  public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;  // "cpu", "cuda:0", "planning(cuda:0)"
    virtual DeviceRef device() const = 0;
    // Storage type of activations and of the weights' compute copy: f32 on the CPU, bf16 on CUDA.
    // Parameter gradients, optimizer moments, norms' rstd and attention lse are always f32.
    virtual DType compute_dtype() const = 0;

    // ---- memory (setup time only: never inside a step or a graph capture) -------------------
    // Zero-filled device memory.
    virtual Buffer allocate(size_t bytes) = 0;
    // Host memory the device copies from and to fastest (pinned on CUDA).
    virtual Buffer allocate_host(size_t bytes) = 0;

    // ---- ordering and transfers -----------------------------------------------------------------
    // Copies host memory into a device tensor (same dtype and element count). The host source
    // must stay unchanged until the work queued so far has finished (synchronize).
    virtual void upload(const Tensor& dst, const Tensor& src_host) = 0;
    // Copies a device tensor into host memory and waits for it (and for all work before it).
    virtual void download(const Tensor& dst_host, const Tensor& src) = 0;
    // dst = src on the device, same element count; f32 <-> bf16 convert (round to nearest even),
    // other dtypes must match.
    virtual void copy(const Tensor& dst, const Tensor& src) = 0;
    // dst[:, col : col + C] = src for dst [R, W] and src [R, C] (same dtype).
    virtual void copy_columns(const Tensor& dst, int64_t col, const Tensor& src) = 0;
    // Every element = value (f32, bf16; i32 takes the value as an integer).
    virtual void fill(const Tensor& t, float value) = 0;
    // dst[row0[0] + i] = src[i] for every row i of src (rows: the first dimension; the rest of the
    // shape and the dtype equal). row0 i32 [1] lives on the device, so the step that writes a KV
    // cache row is the same step at every position (one captured graph serves them all). Rows
    // that would land past dst's end are not written: callers check the capacity on the host.
    virtual void write_rows(const Tensor& dst, const Tensor& row0, const Tensor& src) = 0;
    // Waits until every operation queued on this backend has finished.
    virtual void synchronize() = 0;

    // ---- replayable steps (docs/engine.md, backend/step_graph.h) --------------------------------
    // Runs `record` as the step `key`. The CUDA backend runs it eagerly GraphOptions::warmup_runs
    // times, then records it into a CUDA graph and from then on replays the graph: `record` is
    // still called every time (its host code stages inputs into pinned memory), but its ops are
    // not queued, the graph's are. So within `record`: no allocate, download or synchronize; an
    // upload only from pinned memory (Workspace inputs), each input in its own place for the whole
    // step; and every host value an op takes (shapes, addresses, scalars) either fixed for the
    // key or read from device memory. A capture that fails leaves the device usable and runs
    // `record` eagerly (counted, told once; see GraphCache). Other backends call `record`.
    virtual void run_step(const StepKey& key, const std::function<void()>& record) { record(); }
    // True inside run_step while a graph is being captured or replayed (Workspace refuses to reuse
    // staging memory then).
    virtual bool recording_step() const { return false; }
    // A fresh owner for step keys (StepOwner) and the end of one: its graphs are dropped.
    virtual uint64_t new_step_owner() { return 0; }
    virtual void release_steps(uint64_t owner) { (void)owner; }
    // This device's graph-cache counters (enabled false where there is no graph cache).
    virtual GraphStats graph_stats() const { return {}; }

    // Collectives over the workers of a run done by the devices themselves (NCCL on CUDA), queued
    // on this backend's stream like an op: no host synchronisation. `host` is this worker's host
    // communicator (it carries the setup, e.g. NCCL's unique id, and every worker of the run must
    // call this together). While they live, this backend's host waits (download, synchronize)
    // are bounded by opt.timeout_s and end at DeviceCollectives::abort. Null where the backend
    // has none: the caller then sums through the host.
    virtual std::unique_ptr<DeviceCollectives> make_device_collectives(
        Communicator& host, const CollectiveOptions& opt) {
        (void)host;
        (void)opt;
        return nullptr;
    }

    // ---- the op set -----------------------------------------------------------------------------
    // C = alpha * op(A) · op(B) + beta * C, op(X) = X or Xᵀ. A linear layer with an HF weight
    // W [out, in] is gemm(x, false, W, true, y): y[M, out] = x[M, in] · Wᵀ. Tensors of rank > 2
    // are viewed as [numel / last, last]. CUDA: A and B bf16, C bf16 or f32 (f32 for parameter
    // gradients, accumulated with beta = 1).
    virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                      float alpha = 1.0f, float beta = 0.0f) = 0;

    // A bf16 copy of the weight w [N, K] for linear(), for products that may trade precision for
    // speed (drafting: Note [bf16 drafting] in backend/cpu/bf16_linear.h), or null where this
    // backend has no faster bf16 product than gemm (CUDA, whose gemm is bf16 already; a CPU
    // without AMX). Setup time only: it allocates.
    virtual std::unique_ptr<PreparedWeight> prepare_bf16_weight(const Tensor& w) {
        (void)w;
        return nullptr;
    }
    // y = x · Wᵀ + beta * y: from `prepared` when it is not null (this backend's
    // prepare_bf16_weight of w), else gemm(x, false, w, true, y, 1, beta). x viewed as [M, K].
    virtual void linear(const Tensor& x, const Tensor& w, const PreparedWeight* prepared,
                        const Tensor& y, float beta = 0.0f) {
        (void)prepared;
        gemm(x, false, w, true, y, 1.0f, beta);
    }

    // out[S, D] = table[ids[s]]; ids i32 [S], table [V, D].
    virtual void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
    // dtable[ids[s]] += dout[s]; dtable f32. Deterministic (no floating-point atomics).
    virtual void embedding_bwd(const Tensor& ids, const Tensor& dout, const Tensor& dtable) = 0;

    // RMSNorm over the last dim C = w.numel(); x, y viewed as [R, C]; rstd f32 [R] (may be empty).
    virtual void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                             const Tensor& rstd) = 0;
    // dx overwritten, dw (f32) accumulated (+=). rstd from the forward.
    virtual void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const Tensor& dx, const Tensor& dw) = 0;

    // In place on x [S, Hx, Dh] with positions i32 [S]; inv_freq f32 [Dh/2] (rope_inv_freq, on
    // this device). Angles, cos and sin in f32 as the HF reference computes them.
    virtual void rope_fwd(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) = 0;
    // In place on dx: the transpose of the rotation (rotation by the negative angle).
    virtual void rope_bwd(const Tensor& dx, const Tensor& positions, const Tensor& inv_freq) = 0;

    // q [Sq, H, Dh], k/v [Sk, Hkv, Dh], out [Sq, H, Dh], lse f32 [H, Sq] (may be empty).
    // GQA: head h reads kv head h / (H / Hkv). Scale Dh^-1/2. A row that sees no key gets out 0 and
    // lse -inf. See AttnMask for which keys a query sees.
    virtual void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                               const AttnMask& mask, const Tensor& out, const Tensor& lse) = 0;
    // dq, dk, dv overwritten. Deterministic.
    virtual void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const AttnMask& mask, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv) = 0;

    // out = silu(gate) * up over [R, I]. dgate, dup overwritten.
    virtual void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
    virtual void swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up,
                            const Tensor& dgate, const Tensor& dup) = 0;

    // y += alpha * x (residual add, gradient accumulation; y may be f32 with x bf16); y *= alpha.
    virtual void add_inplace(const Tensor& y, const Tensor& x, float alpha = 1.0f) = 0;
    virtual void scale_inplace(const Tensor& y, float alpha) = 0;
    // y [R, C] += bias [C] on every row (Qwen2's q/k/v projection biases).
    virtual void add_row_bias(const Tensor& y, const Tensor& bias) = 0;

    // Final projection + cross-entropy over vocabulary chunks of `chunk` rows of w (never the
    // whole [R, V] logits). h [R, D], w [V, D], labels i32 [R], weights f32 [R]. Rows with weight 0
    // are ignored (their label may be -1). See LmHeadCeOut; out.workspace must hold
    // lm_head_ce_workspace(R, D, V, chunk) f32 elements.
    virtual void lm_head_ce(const Tensor& h, const Tensor& w, const Tensor& labels,
                            const Tensor& weights, float grad_scale, int64_t chunk,
                            const LmHeadCeOut& out) = 0;
    virtual int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                         int64_t chunk) const = 0;

    // Final projection + distillation over vocabulary chunks of `chunk` rows of w (never a whole
    // [R, V] logits matrix): per row r, the teacher p = softmax(t_r · Wᵀ) (no gradient flows into
    // it), the draft q = softmax(h_r · Wᵀ) and loss_r = KL(p || q) = sum_v p_v (log p_v - log q_v)
    // at temperature 1. h, t [R, D], w [V, D], weights f32 [R]; rows with weight 0 are ignored.
    // The gradient with respect to the draft logits is weight_r * (q - p). See LmHeadKlOut;
    // out.workspace must hold lm_head_kl_workspace(R, D, V, chunk) f32 elements.
    virtual void lm_head_kl(const Tensor& h, const Tensor& t, const Tensor& w,
                            const Tensor& weights, float grad_scale, int64_t chunk,
                            const LmHeadKlOut& out) = 0;
    virtual int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                         int64_t chunk) const = 0;

    // Adds one micro-batch's loss and accuracy sums into stats f32 [2 + 2P] (see LossStatsLayout):
    // rows r with weights[r] > 0 add weights[r] * loss_rows[r] to the loss sum, weights[r] to the
    // weight sum, and count at position r % P (correct when argmax[r] == labels[r]).
    virtual void loss_stats(const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                            const Tensor& weights, int64_t period, const Tensor& stats) = 0;

    // out f32 [1] = sum of x² over x f32 (overwritten). Deterministic.
    virtual void sum_squares(const Tensor& x, const Tensor& out) = 0;
    // scale f32 [1] = max_norm / (sqrt(norm_sq) + 1e-6) when max_norm > 0 and the norm exceeds it,
    // else 1 (torch.nn.utils.clip_grad_norm_'s rule), computed on the device.
    virtual void clip_scale(const Tensor& norm_sq, float max_norm, const Tensor& scale) = 0;
    // Decoupled-weight-decay Adam on fp32 master/grad/moments (any equal element counts: a whole
    // flat parameter buffer at once). The gradient is multiplied by grad_scale[0] (f32 [1], on
    // the device; empty = 1) first. `value` (may be empty) receives the updated master in its own
    // dtype (the bf16 compute copy).
    virtual void adamw_step(const Tensor& master, const Tensor& grad, const Tensor& m,
                            const Tensor& v, const AdamWParams& p, const Tensor& grad_scale,
                            const Tensor& value) = 0;

    // out i32 [R] = index of the largest element of each row of x [R, V] (lowest on ties).
    virtual void argmax_rows(const Tensor& x, const Tensor& out) = 0;
    // out i32 [R]: for each row of logits f32 [R, V], the token that uniforms[r] (f32 in [0, 1),
    // on the device) picks from the row's sampling distribution (backend/sampling.h).
    virtual void sample_rows(const Tensor& logits, const SampleParams& p, const Tensor& uniforms,
                             const Tensor& out) = 0;

    // ---- DFlash2 (docs/formats.md "DFlash2 drafter directory") ----------------------------------
    // Grouped dynamic causal convolution over x [R, D], R rows made of consecutive blocks of
    // block_size rows (R % block_size == 0; row r sits at in-block position r % block_size, so taps
    // never cross a block). base [2, k, D] (k taps), delta [R, 2*k*G] (the kernel projection of the
    // sublayer input, G groups of S = D / G contiguous channels), half 0 (before the sublayer) or 1
    // (after it). The dynamic coefficient belongs to the OUTPUT row:
    //   y[r, c] = sum_{t < k, t <= r % block_size} (base[half, t, c] + delta[r, (half*k + t)*G +
    //             c / S]) * x[r - t, c].
    // y [R, D] may not alias x.
    virtual void dyn_conv_fwd(const Tensor& x, const Tensor& base, const Tensor& delta,
                              int64_t half, int64_t block_size, const Tensor& y) = 0;
    // dx [R, D] overwritten; dbase f32 [2, k, D] accumulated (+=) in its half; ddelta [R, 2*k*G]
    // (compute dtype) overwritten in the half's k*G columns, the other half's left alone.
    // Deterministic.
    virtual void dyn_conv_bwd(const Tensor& dy, const Tensor& x, const Tensor& base,
                              const Tensor& delta, int64_t half, int64_t block_size,
                              const Tensor& dx, const Tensor& dbase, const Tensor& ddelta) = 0;

    // The candidate selector's pair scores (without the unary term): for slot p, predecessor i and
    // candidate j, out[p, i, j] = sum_r A[pred[p, i], r] * z[p, r] * Bc[cand[p, j], r], summed in
    // f32. z [P, r] (hidden_projection of the slot's hidden state), pred i32 [P, Kp], cand i32
    // [P, K] (ids in [0, V)), A / Bc [V, r] (predecessor / successor codebooks), out f32
    // [P, Kp, K].
    virtual void selector_scores_fwd(const Tensor& z, const Tensor& pred, const Tensor& cand,
                                     const Tensor& a, const Tensor& bc, const Tensor& out) = 0;
    // dscores f32 [P, Kp, K]; dz [P, r] (compute dtype) overwritten; da / dbc f32 [V, r]
    // accumulated (+=) at the rows the ids name. Deterministic (no floating-point atomics).
    virtual void selector_scores_bwd(const Tensor& dscores, const Tensor& z, const Tensor& pred,
                                     const Tensor& cand, const Tensor& a, const Tensor& bc,
                                     const Tensor& dz, const Tensor& da, const Tensor& dbc) = 0;

    // values f32 [R, K] and indices i32 [R, K]: the K largest entries of each row of x f32 [R, V],
    // largest first, equal values in ascending index order (so indices[r, 0] == argmax_rows).
    // 1 <= K <= V.
    virtual void topk_rows(const Tensor& x, const Tensor& values, const Tensor& indices) = 0;

    // ---- DFlash2 selector loss (docs/training.md; backend/cpu/selector_loss.cpp) ---------------
    // Hard target injection after topk_rows(logits, values, ids): for a row r with labels[r] >= 0
    // whose label is candidate k, label_pos[r] = k and hit[r] = 1; a label outside the strict
    // top-K replaces the weakest candidate (k = K-1) with its own logit (values[r, K-1] =
    // logits[r, labels[r]], ids[r, K-1] = labels[r]), label_pos[r] = K-1 and hit[r] = 0. Rows
    // with labels[r] < 0: label_pos -1, hit 0, candidates unchanged. logits f32 [R, V], labels /
    // label_pos / hit i32 [R], values f32 [R, K] and ids i32 [R, K] updated in place.
    virtual void selector_inject(const Tensor& logits, const Tensor& labels, const Tensor& values,
                                 const Tensor& ids, const Tensor& label_pos, const Tensor& hit) = 0;
    // The selector's K-way cross-entropy (see SelectorCeArgs): per row, scores S_k = u(values_k)
    // + pair_k with u the unary post-processing (x multiplier, then the soft cap), loss
    // -log softmax(S)[label_pos] and its gradients.
    virtual void selector_ce(const SelectorCeArgs& a) = 0;
    // Adds one micro-batch's selector sums into stats f32 [SelectorStatsLayout{block}.size()]:
    // rows in blocks of `block` rows (row 0 of each block is the anchor), per row the loss,
    // the teacher-forced pick, label_pos and hit of selector_inject / selector_ce and its weight.
    // The self-conditioned path of a block is alive at row k while every trained row 1..k hit and
    // picked the target (teacher-forced predecessors = the path's own while it is alive); the
    // oracle run lasts while the target is in the strict top-K.
    virtual void selector_stats(const Tensor& loss_rows, const Tensor& pick,
                                const Tensor& label_pos, const Tensor& hit, const Tensor& weights,
                                int64_t block, const Tensor& stats) = 0;
    // out f32 [R, D] = sum_k dvalues[r, k] * w[ids[r, k]] (overwritten): the gradient that the
    // candidates' logits (h_r . w[id]) send to h. dvalues f32 [R, K], ids i32 [R, K], w [V, D]
    // (the compute dtype). Deterministic.
    virtual void selector_unary_bwd(const Tensor& dvalues, const Tensor& ids, const Tensor& w,
                                    const Tensor& out) = 0;
};

// An owner of step keys for as long as it lives: a session or worker whose buffers stay put holds
// one, keys its steps with id(), and its graphs are dropped when it goes (their addresses may be
// reused by the next allocation).
class StepOwner {
  public:
    explicit StepOwner(Backend& be) : be_(&be), id_(be.new_step_owner()) {}
    ~StepOwner() {
        if (be_) be_->release_steps(id_);
    }
    StepOwner(StepOwner&& o) noexcept : be_(o.be_), id_(o.id_) { o.be_ = nullptr; }
    StepOwner& operator=(StepOwner&&) = delete;
    StepOwner(const StepOwner&) = delete;
    StepOwner& operator=(const StepOwner&) = delete;
    uint64_t id() const { return id_; }

  private:
    Backend* be_;
    uint64_t id_;
};

// A tensor's address as a StepKey dim (0 for an empty tensor).
inline int64_t address_of(const Tensor& t) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data()));
}

// Indices into the stats tensor of Backend::loss_stats for accuracy period P.
struct LossStatsLayout {
    int64_t period = 1;
    static constexpr int64_t kLossSum = 0;
    static constexpr int64_t kWeightSum = 1;
    int64_t correct(int64_t k) const { return 2 + k; }
    int64_t count(int64_t k) const { return 2 + period + k; }
    int64_t size() const { return 2 + 2 * period; }
};

// Inverse frequencies [Dh/2] of NeoX RoPE with the Qwen3/Llama rope_scaling variants, in float32
// like the HF reference.
std::vector<float> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);

std::unique_ptr<Backend> make_cpu_backend(int threads);
// A backend that checks nothing and does nothing, reporting `real`'s device and compute dtype:
// step code run against it with a planning Workspace measures the workspace a step needs.
std::unique_ptr<Backend> make_planning_backend(const Backend& real);

}  // namespace dflash
