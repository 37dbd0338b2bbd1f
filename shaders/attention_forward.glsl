// The forward kernels' shared steps (attention.comp's row kernels,
// attention_tiled.comp, attention_coopmat.comp): each begins with
// initIndices (its item, KV head and rows), keeps a row's output
// accumulator where its layout wants it (registers, a lane's slots,
// shared memory), and all of them fold scores into the online softmax,
// finish a row and write its partial, output, log-sum-exp and weights
// through these, so the arithmetic and its special cases (masked keys,
// rows with no visible key, padded rows, sinks) are the same in every
// kernel. The online softmax's scalar rules are softmax.glsl's. Before
// including, a kernel defines what attention_common.glsl needs.

#include "attention_common.glsl"

int H;      // the call's query heads: a head's rows of LSE, weights and partials follow the rows of b * H + head
int group;  // query heads per KV head (GQA)
int packed; // a KV head's packed rows: the rows of its group's query heads, head after head (group * L)

// initIndices begins a forward workgroup, as ggml's init_indices begins
// each of its flash-attention kernels: batch item z's dimensions and
// lengths (beginItem), H, the group, the KV head hk of the workgroup's
// rows, and (returned) the first of them. The rows come in blocks of
// blockRows: a KV head's packed rows, y naming the KV head (and with
// SPLIT_K the row block, rowBlocks() of them a KV head) and x the row block
// (SPLIT_K: the key split); or, perQueryHead (the row kernel's grid
// without SPLIT_K), query head y's rows, x naming the block.
int initIndices(int blockRows, bool perQueryHead) {
    beginItem(int(gl_WorkGroupID.z));
    H = queryHeads();
    group = headGroup();
    packed = group * L;
    int y = int(gl_WorkGroupID.y);
#ifdef SPLIT_K
    int rowBlocks = rowBlocks();
    hk = y / rowBlocks;
    return (y % rowBlocks) * blockRows;
#else
    hk = perQueryHead ? y / group : y;
    return int(gl_WorkGroupID.x) * blockRows;
#endif
}

// packedRow sets row and head to packed row rho's query row and head
// (clamped into range) and says whether the row exists.
bool packedRow(int rho, out int row, out int head) {
    bool exists = rho < packed;
    rho = min(rho, packed - 1);
    row = rho % L;
    head = hk * group + rho / L;
    return exists;
}

// packedKeyRange narrows [keyBegin, keyEnd) to the keys some row of the
// block of blockRows packed rows from rowBase can see (keyRange of its
// rows where they are one head's, of every row where they span heads).
void packedKeyRange(int rowBase, int blockRows, inout int keyBegin, inout int keyEnd) {
    int last = min(rowBase + blockRows, packed) - 1;
    bool oneHead = rowBase / L == last / L;
    keyRange(oneHead ? rowBase % L : 0, oneHead ? last % L : L - 1, keyBegin, keyEnd);
}

// ONLINE_SOFTMAX folds a step of n scores of one row, SCORE for t in
// [0, n) (SCORE names the caller's variable t and is assigned to: scores
// in, e^(s - m) out), into the row's running max m and sum l, and sets
// alpha to the factor the row's output accumulator is scaled by before
// the step's P V joins it.
#define ONLINE_SOFTMAX(t, n, SCORE, m, l, alpha)      \
    {                                                 \
        float mNew_ = m;                              \
        [[unroll]] for (int t = 0; t < n; t++) {      \
            mNew_ = max(mNew_, SCORE);                \
        }                                             \
        alpha = rescale(m, l, mNew_);                 \
        [[unroll]] for (int t = 0; t < n; t++) {      \
            SCORE = expFrom(SCORE, mNew_);            \
            l += SCORE;                               \
        }                                             \
    }

// padded: query row `row` of the chunk is past its item's query length
// (its output is zeros, its log-sum-exp -inf).
bool padded(int row) { return chunkFirstRow() + row >= queryLen; }

// finishRow ends query row `row` of head `head` after its last key: folds
// the head's sink into its max m and sum l, and returns the factor its
// unnormalised output is scaled by. A padded row or a row with no visible
// key (and no sink) has no softmax: vkattn defines its output as zeros
// and its log-sum-exp as -inf; l is then 0 (which the weights pass reads).
float finishRow(inout float m, inout float l, int head, int row) {
    bool pad = padded(row);
    float alpha = 1.0;
    if ((VARIANTS & VAR_SINKS) != 0 && !pad) {
        alpha = foldSink(m, l, sinkOf(head));
    }
    bool live = !pad && l > 0.0;
    float inv = live ? alpha / l : 0.0;
    if (!live) {
        l = 0.0;
    }
    return inv;
}

// outBase is where query row `row` of head `head` starts in O.
int outBase(int head, int row) { return oOffset() + b * P.oStride.x + head * P.oStride.y + row * P.oStride.z; }

// storeOut writes vec4 slot c (elements 4c..4c+3, those below d_v) of the
// output row at oBase.
void storeOut(int oBase, int c, vec4 o) {
    [[unroll]] for (int e = 0; e < 4; e++) {
        if (4 * c + e < DV) {
            oData[oBase + 4 * c + e] = o[e];
        }
    }
}

// rowIndex is query row `row` of head `head` in LSE and weights, whose
// heads have the call's callRows() rows.
int rowIndex(int head, int row) { return (b * H + head) * callRows() + row; }

// storeLSE writes a finished row's log-sum-exp, if the call wants it.
void storeLSE(int head, int row, float m, float l) {
    if ((flags & FLAG_LSE) != 0) {
        lseData[lseOffset() + rowIndex(head, row)] = lseOf(m, l);
    }
}

// storeWeight writes the weight of key j (score s) of a finished row (max
// m, sum l: 0 for a row with no softmax, whose weights are zeros).
void storeWeight(int head, int row, int j, float s, float m, float l) {
    wData[weightsOffset() + rowIndex(head, row) * S + j] = l > 0.0 ? expFrom(s, m) / l : 0.0;
}

// Split-K (flash-decoding): each key split of a query row leaves a
// partial of DV + 2 floats in the weights binding - its max (natural
// units), its sum and its unnormalised output row - which
// attention_combine.comp merges. A split that saw no visible key of the
// row, and a padded row, leave max -inf, sum 0 and zeros.

// partialBase is where split `split`'s partial of query row `row` of head
// `head` starts.
int partialBase(int head, int row, int split) { return (((b * H + head) * L + row) * splitCount() + split) * (DV + 2); }

// partialLive: a split's partial of query row `row`, whose sum is l, is
// not the empty one.
bool partialLive(int row, float l) { return !padded(row) && l > 0.0; }

// storePartialSum writes a partial's max and sum (live) or -inf and 0.
void storePartialSum(int base, bool live, float m, float l) {
    wData[base] = live ? m : NEG_INF;
    wData[base + 1] = live ? l : 0.0;
}

// storePartialOut writes vec4 slot c of a partial's output row (live) or
// zeros.
void storePartialOut(int base, bool live, int c, vec4 o) {
    [[unroll]] for (int e = 0; e < 4; e++) {
        if (4 * c + e < DV) {
            wData[base + 2 + 4 * c + e] = live ? o[e] : 0.0;
        }
    }
}
