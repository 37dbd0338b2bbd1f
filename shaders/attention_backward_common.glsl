// What the two backward kernels share (attention_backward.comp, the
// workgroup-tiled passes, and attention_backward_rows.comp, lavapipe's
// row passes): the item and head a workgroup works on, where the rows of
// Q, K, V, O and of the dense gradients start, the probabilities and the
// soft-cap's derivative, the query rows that see a block of keys (the key
// pass) and a query row's share of its head's sink gradient (the query
// pass), and the bindings the passes write. Before including, a kernel
// includes attention_common.glsl and defines GRAD_T, the type its
// gradients are written as (float, or vec4: four elements a store).

// The query pass writes dQ, and D and the sink shares for the key pass
// and the host; the key pass writes dK and dV. (The key pass reads D as
// the kernel chooses.)
#ifdef KV_PASS
layout(std430, binding = BIND_DK) writeonly buffer DKBuf { GRAD_T dK[]; };
layout(std430, binding = BIND_DV) writeonly buffer DVBuf { GRAD_T dV[]; };
#else
layout(std430, binding = BIND_ROWD) writeonly buffer RowDBuf { float rowD[]; };
layout(std430, binding = BIND_DQ) writeonly buffer DQBuf { GRAD_T dQ[]; };
layout(std430, binding = BIND_DSINK) writeonly buffer DSinkBuf { float dSink[]; };
#endif

int H;     // the call's query heads
int group; // query heads per KV head

// beginBackward reads batch item z's dimensions and lengths (beginItem),
// the call's query heads and the group.
void beginBackward() {
    beginItem(int(gl_WorkGroupID.z));
    H = queryHeads();
    group = headGroup();
}

int qBase(int h, int t) { return qOffset() + b * P.qStride.x + h * P.qStride.y + t * P.qStride.z; }
int kBase(int j) { return kOffset() + hk * P.kStride.y + keyRow(P.kStride, j); }
int vBase(int j) { return vOffset() + hk * P.vStride.y + keyRow(P.vStride, j); }
int oBase(int h, int t) { return oOffset() + b * P.oStride.x + h * P.oStride.y + t * P.oStride.z; }
// dO, dQ, the log-sum-exp, D and the sink shares are dense (B, H, L[, d]):
// rowOf is a row of the chunk, the accessors add its window's offset
// (lseOffset(), dOOffset() and the rest). dK, dV and dw_a's shares are dense (B, H_kv, S, d):
// kvRowOf is key j's row of them, to which the kernels add dKOffset()w.
int rowOf(int h, int t) { return (b * H + h) * L + t; }
int kvRowOf(int j) { return (b * (H / group) + hk) * S + j; }

// capGrad is d(score)/d(scaled dot product): the soft-cap's 1 - tanh^2.
float capGrad(float qk) {
    if ((VARIANTS & VAR_SOFTCAP) == 0) {
        return 1.0;
    }
    float c = softcapLimit();
    float y = softcap(qk * scoreScale(), c) / c;
    return 1.0 - y * y;
}

// probOf is P = exp(s - lse), 0 for a masked key and at most 1 as the
// forward's weights are: a backward pass sums a score in its own order,
// and at large scores the few ulps it may land above the forward's
// maximum, the lse, made exp overflow to Inf and the gradients NaN.
float probOf(float s, float lse) {
    return s == NEG_INF ? 0.0 : min(exp(s - lse), 1.0);
}

// queryRange is [rowBegin, rowEnd), the item's query rows that can see a
// key of [firstKey, lastKey] (causal mask, window): the key pass walks
// only those.
void queryRange(int firstKey, int lastKey, out int rowBegin, out int rowEnd) {
    rowBegin = 0;
    rowEnd = min(L, queryLen);
    if ((flags & FLAG_CAUSAL) != 0) {
        rowBegin = max(rowBegin, firstKey - shift);
    }
    if ((VARIANTS & VAR_WINDOW) != 0) {
        if (windowLeft() >= 0) {
            rowEnd = min(rowEnd, lastKey + windowLeft() - posShift + 1);
        }
        if (windowRight() >= 0) {
            rowBegin = max(rowBegin, firstKey - windowRight() - posShift);
        }
    }
}

// sinkShare is a query row's share of its head's sink gradient,
// dL/dsink = -P_sink D (the sink takes probability from the keys): 0
// without sinks or for a row that is not live.
float sinkShare(bool live, int h, float lse, float d) {
    if ((VARIANTS & VAR_SINKS) == 0 || !live) {
        return 0.0;
    }
    return -exp(sinkOf(h) - lse) * d;
}
