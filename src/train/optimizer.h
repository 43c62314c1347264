// AdamW over a ParamSet's flat f32 master weights with flat f32 moments on the same device
// (docs/training.md "What a step does": fp32 master weights, decoupled weight decay), the global
// gradient norm and its clipping factor, all computed on the device (no host round trip inside a
// step). With train.shard_optimizer_state each of W workers keeps the moments of, and updates, one
// FlatShard of the flat parameters (Note [Optimizer-state sharding] in
// train/gradient_exchange.cpp). Tested by tests/train/optimizer_test.cpp and, sharded,
// tests/train/optimizer_shard_test.cpp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/params.h"

namespace dflash::train {

// Muon (docs/training.md "Muon"): momentum, Newton-Schulz orthogonalisation of the update and a
// shape-dependent learning rate for the 2-D weights (muon_updates), AdamW for the rest.
enum class MuonLrAdjust {
    match_rms_adamw,  // lr * 0.2 * sqrt(max(A, B)): the update's RMS matches AdamW's
    original,         // lr * sqrt(max(1, A / B))
};
struct MuonConfig {
    bool enabled = false;  // train.optimizer=muon
    double lr_ratio = 10;  // Muon's lr over AdamW's (train.muon_lr / train.lr)
    double momentum = 0.95;
    double weight_decay = 0.1;  // decoupled, with the unadjusted lr
    int64_t ns_steps = 5;
    double eps = 1e-7;
    MuonLrAdjust adjust = MuonLrAdjust::match_rms_adamw;
};

// The quintic Newton-Schulz step X <- a X + (b A + c A^2) X, A = X Xᵀ.
inline constexpr double kMuonNsA = 3.4445, kMuonNsB = -4.7750, kMuonNsC = 2.0315;

// Whether Muon updates a parameter: 2-D with both sizes > 1, and not an embedding or LM head.
bool muon_updates(const Param& p);
// The factor Muon's lr is multiplied by for an [A, B] weight.
double muon_lr_factor(MuonLrAdjust adjust, int64_t A, int64_t B);

// Scratch of the Newton-Schulz iteration for matrices of up to `max_numel` elements and
// `max_gram` elements of X·Xᵀ, in the backend's compute dtype (and f32 for the update).
struct NsScratch {
    DeviceTensor update;      // f32 [max_numel]
    DeviceTensor x, y;        // [max_numel]
    DeviceTensor gram, poly;  // [max_gram]
    DeviceTensor norm_sq;     // f32 [1]
    NsScratch() = default;
    NsScratch(Backend& be, int64_t max_numel, int64_t max_gram);
};
// x [A, B] (compute dtype) <- NS_steps(x): the iteration on the short side (Xᵀ·X for a tall x,
// never an explicit transpose). x must already have Frobenius norm <= 1.
void newton_schulz(Backend& be, const Tensor& x, int64_t steps, NsScratch& s);

struct AdamWConfig {
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.0;
    MuonConfig muon;  // enabled: Muon for the parameters muon_updates picks
};

// The part of a flat parameter buffer of `numel` elements that worker `rank` of `world` updates
// when the optimizer state is sharded: its chunk [rank * chunk, (rank + 1) * chunk) of the first
// world * chunk elements (chunk a multiple of kAlign, so every chunk starts 256-byte aligned and
// the collectives see equal counts), plus the tail [world * chunk, numel) of fewer than
// world * (kAlign + 1) elements, which every worker updates alike. Unsharded (world 1), the
// chunk is empty and the tail is everything.
struct FlatShard {
    static constexpr int64_t kAlign = 64;
    int64_t numel = 0;
    int world = 1;
    int rank = 0;
    int64_t chunk = 0;

    static FlatShard whole(int64_t numel) { return {numel, 1, 0, 0}; }
    static FlatShard of(int64_t numel, int world, int rank);

    bool sharded() const { return chunk > 0; }
    int64_t begin() const { return rank * chunk; }
    int64_t end() const { return begin() + chunk; }
    int64_t tail() const { return world * chunk; }            // first element of the common tail
    int64_t owned() const { return chunk + numel - tail(); }  // moment elements per worker
};

// AdamW over every parameter, or (cfg.muon.enabled) Muon over the weights muon_updates picks and
// AdamW over the rest. A Muon weight's momentum is kept where its AdamW first moment would be (m,
// at its flat offset; its v stays 0), so checkpoints and resumes carry it unchanged. With a
// sharded state, Muon runs in two halves around a gather (Note [Sharded Muon] in optimizer.cpp;
// gathers_updates).
class AdamW {
  public:
    // Zero moments for `shard` of the flat parameters of `params` (which must be training); by
    // default all of them.
    AdamW(const ParamSet& params, AdamWConfig cfg);
    AdamW(const ParamSet& params, AdamWConfig cfg, FlatShard shard);

    // One update of every parameter from its gradient times grad_scale[0] (f32 [1] on the device:
    // the clipping factor; empty = 1) with learning rate `lr`; the step count (bias correction)
    // advances by one. The compute copy of the weights is refreshed in the same pass.
    void step(Backend& be, ParamSet& params, double lr, const Tensor& grad_scale);

    // The same in two halves, for a recorded step (Backend::run_step): begin_step advances the
    // step count and sends this step's scalars (from lr) to the device, outside the recorded
    // part; apply queues the update, which reads them there.
    void begin_step(Backend& be, double lr);
    void apply(Backend& be, ParamSet& params, const Tensor& grad_scale);
    // Sharded Muon (Note [Sharded Muon]): apply leaves each Muon weight's Nesterov update, for
    // the elements this worker keeps, in the gradients; once every worker's chunk of them is
    // gathered (all of flat_grads()[0, shard().tail())), finish_muon orthogonalises each matrix
    // this worker's shard touches and updates those elements of it.
    bool gathers_updates() const { return shard_.sharded() && !muon_matrices_.empty(); }
    void finish_muon(Backend& be, ParamSet& params);

    int64_t steps_done() const { return steps_; }
    void set_steps_done(int64_t n) { steps_ = n; }
    const AdamWConfig& config() const { return cfg_; }
    const FlatShard& shard() const { return shard_; }
    // The moments this worker keeps, f32 [shard().owned()] on the params' device: the chunk's
    // [chunk] then the tail's [numel - tail]; unsharded, [numel] in ParamSet order
    // (Param::offset).
    Tensor m() const { return m_.view(); }
    Tensor v() const { return v_.view(); }

  private:
    AdamWConfig cfg_;
    FlatShard shard_;
    int64_t steps_ = 0;
    DeviceTensor m_;
    DeviceTensor v_;
    DeviceTensor scalars_;  // f32 [3]: adamw_step_scalars of the current step, then Muon's [2]
    Buffer scalars_host_;   // their staging memory (pinned on CUDA)
    // Muon: the parameters it updates (their momentum lives in m at their flat offset; their v
    // stays 0) and the flat ranges AdamW updates, the runs between them.
    struct MuonMatrix {
        int64_t offset = 0, rows = 0, cols = 0;  // [rows, cols] at `offset` in the flat buffers
        float lr_factor = 1;                     // muon_lr_factor of its shape
    };
    std::vector<MuonMatrix> muon_matrices_;
    std::vector<std::pair<int64_t, int64_t>> adamw_ranges_;
    NsScratch ns_;
    void apply_muon(Backend& be, ParamSet& params, const Tensor& grad_scale);
    // The parts of the flat range [lo, hi) this worker keeps state for, each with where its state
    // starts in m and v: the range itself unsharded; its overlaps with the chunk and the tail.
    struct Piece {
        int64_t lo = 0, hi = 0, state = 0;
    };
    std::vector<Piece> owned_pieces(int64_t lo, int64_t hi) const;
};

// norm_sq (f32 [1] on the device) = sum of squares of every gradient; the global norm is its root.
void grad_norm_sq(Backend& be, const ParamSet& params, const Tensor& norm_sq);

// The flat ranges of `shard` as views of a flat [numel] tensor: the chunk and the tail.
Tensor shard_chunk(const Tensor& flat, const FlatShard& shard);
Tensor shard_tail(const Tensor& flat, const FlatShard& shard);

}  // namespace dflash::train
