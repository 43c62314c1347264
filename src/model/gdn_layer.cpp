// The Gated DeltaNet mixer and its replay. Tested by tests/model/hybrid_forward_test.cpp.
#include "model/gdn_layer.h"

namespace dflash {

void gdn_mixer_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& h,
                       const LinearState& st, LinearMode mode, const Tensor& count,
                       const LinearSaved* save, const Tensor& y, bool accumulate) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t S = h.dim(0), C = d.lin_conv_dim(), hv = d.lin_hv, vd = d.lin_hv * d.lin_dv;
    const DType act = be.compute_dtype();
    const Workspace::Mark mark = lc.ws.mark();
    auto f32 = [&](Shape s) { return lc.ws.take(s, DType::f32); };
    const Tensor qkv = lc.ws.take({S, C}, act), z = lc.ws.take({S, vd}, act);
    const Tensor b = lc.ws.take({S, hv}, act), a = lc.ws.take({S, hv}, act);
    linear(be, lc.prepared, h, w.lin_qkv, qkv);
    linear(be, lc.prepared, h, w.lin_z, z);
    linear(be, lc.prepared, h, w.lin_b, b);
    linear(be, lc.prepared, h, w.lin_a, a);
    const Tensor conv_out = lc.ws.take({S, C}, act);
    be.gdn_conv(qkv, w.lin_conv, st.conv, conv_out);
    // The cache rolls after the convolution has read the inputs before these rows.
    if (!count.empty()) be.gdn_conv_advance(st.conv, qkv, count);
    Tensor q, k, v, g, beta;
    if (save != nullptr) {
        be.copy(save->qkv.rows(0, S), qkv);
        q = save->q.rows(0, S);
        k = save->k.rows(0, S);
        v = save->v.rows(0, S);
        g = save->g.rows(0, S);
        beta = save->beta.rows(0, S);
    } else {
        q = f32({S, d.lin_hk, d.lin_dk});
        k = f32({S, d.lin_hk, d.lin_dk});
        v = f32({S, hv, d.lin_dv});
        g = f32({S, hv});
        beta = f32({S, hv});
    }
    be.gdn_prepare(conv_out, b, a, w.lin_a_log, w.lin_dt_bias, q, k, v, g, beta);
    const Tensor o = f32({S, hv, d.lin_dv});
    if (mode == LinearMode::chunked) {
        be.gdn_chunked(q, k, v, g, beta, st.ssm, o);
    } else {
        be.gdn_recurrent(q, k, v, g, beta, st.ssm, o, Tensor());
    }
    const Tensor normed = lc.ws.take({S, vd}, act);
    be.gdn_gated_norm(o, z, w.lin_norm, d.eps, normed);
    linear(be, lc.prepared, normed, w.lin_out, y, accumulate ? 1.0f : 0.0f);
    lc.ws.release(mark);
}

void gdn_replay(Backend& be, const LinearSaved& saved, const LinearState& st, const Tensor& count) {
    be.gdn_conv_advance(st.conv, saved.qkv, count);
    be.gdn_recurrent(saved.q, saved.k, saved.v, saved.g, saved.beta, st.ssm, Tensor(), count);
}

}  // namespace dflash
