// What the fused attention kernels (attention.comp, attention_tiled.comp,
// attention_coopmat.comp, attention_backward.comp,
// attention_backward_rows.comp) share: the Params block, flags, the mask,
// length, output and per-head bindings, and the rules that turn a dot
// product into a score. Before including, a kernel defines its
// specialization constants MASKED, VARIANTS and PAGED, and TEXEL_LOADS or
// not (how the masks are read). The bindings, flag bits (FLAG_*) and
// score-variant bits (VAR_*; unused ones cost nothing) are named in
// interface.glsl, which attention_params.glsl includes. Q, K and V are
// attention_inputs.glsl's; the forward kernels' index setup and steps
// after the scores are attention_forward.glsl's, the backward kernels'
// skeleton attention_backward_common.glsl's.

#include "softmax.glsl"
#include "attention_params.glsl"

#ifdef TEXEL_LOADS
layout(binding = BIND_MASK) uniform samplerBuffer Mt;
layout(binding = BIND_BOOLMASK) uniform samplerBuffer Bt;
layout(binding = BIND_KEYPAD) uniform samplerBuffer Pt;
#define LOAD_M(i) texelFetch(Mt, (i)).r
#define LOAD_B(i) texelFetch(Bt, (i)).r
#define LOAD_PAD(i) texelFetch(Pt, (i)).r
#else
layout(std430, binding = BIND_MASK) readonly buffer MBuf { float mData[]; };
layout(std430, binding = BIND_BOOLMASK) readonly buffer BBuf { float bData[]; };
layout(std430, binding = BIND_KEYPAD) readonly buffer PadBuf { float padData[]; };
#define LOAD_M(i) mData[(i)]
#define LOAD_B(i) bData[(i)]
#define LOAD_PAD(i) padData[(i)]
#endif

layout(std430, binding = BIND_LENGTHS) readonly buffer Lengths { int lengths[]; }; // [0,B) keys, [B,2B) queries of the whole call
#ifdef BACKWARD
// The backward pass reads the forward's O and log-sum-exp (the row
// kernels' backward, inside its loop: through a texel view).
layout(std430, binding = BIND_O) readonly buffer OBuf { float oData[]; };
#ifdef TEXEL_LOADS
layout(binding = BIND_LSE) uniform samplerBuffer lseTexels;
#else
layout(std430, binding = BIND_LSE) readonly buffer LseBuf { float lseData[]; };
#endif
#else
layout(std430, binding = BIND_O) writeonly buffer OBuf { float oData[]; };
layout(std430, binding = BIND_LSE) writeonly buffer LseBuf { float lseData[]; };
layout(std430, binding = BIND_WEIGHTS) writeonly buffer WBuf { float wData[]; }; // weights, or split-K partials
#endif
// Per query head: sink logit at 2h, ALiBi slope at 2h + 1.
layout(std430, binding = BIND_HEADS) readonly buffer HeadBuf { float headData[]; };
// PAGED: K and V live in a pool of pages of pageSize() positions (page p of
// KV head h at p * stride.x + h * stride.y); key j of item b is row
// j % pageSize() of page table[b][j / pageSize()] (pagesPerItem() entries per
// item), as paged attention reads a block table.
layout(std430, binding = BIND_PAGETABLE) readonly buffer PageTable { int pageOf[]; };

int L, S, DK, DV, flags, shift, b, hk;
int posShift; // key position of query row 0 for the window and ALiBi
int keyLen;   // this item's visible keys
int queryLen; // this item's query rows (of the whole call)

// beginItem reads the dimensions and flags and this item's lengths, and
// sets the causal shift and window/ALiBi positions of batch item bi.
void beginItem(int bi) {
    L = rowsL();
    S = keysS();
    DK = widthK();
    DV = widthV();
    flags = paramFlags();
    shift = causalShift();
    b = bi;
    keyLen = S;
    queryLen = callRows(); // the call's rows (L is this chunk's)
    if ((flags & FLAG_LENGTHS) != 0) {
        keyLen = lengths[firstItem() + b];
        queryLen = lengths[callBatch() + firstItem() + b];
    }
    // Bottom-right alignment to this item's key length: the chunk's first
    // row l0 plus keyLen - L (callRows() is the call's L).
    posShift = (flags & FLAG_ALIGN_POS) != 0 ? chunkFirstRow() + keyLen - callRows() : positionShift();
    if ((flags & FLAG_ALIGN_CAUSAL) != 0) {
        shift = chunkFirstRow() + keyLen - callRows();
    }
}

// keyRow is where key position j of this item starts in K or V (of the
// given strides), but for the head's offset.
int keyRow(ivec4 stride, int j) {
    if (PAGED) {
        int page = pageOf[(firstItem() + b) * pagesPerItem() + j / pageSize()];
        return page * stride.x + (j % pageSize()) * stride.z;
    }
    return b * stride.x + j * stride.z;
}

// softcap is c tanh(e / c) to float32 accuracy for every c. tanh comes
// from exp, which keeps few bits of a small argument (e^2x - 1 cancels):
// there the series of tanh(x) / x through x^8 (truncation below 2^-24
// for |x| < 0.3) scales e itself, so a huge c leaves scores unchanged
// instead of multiplying a rounded tanh. Beyond |x| = 10 tanh is 1 in
// float32: the clamp keeps an infinite e / c (a tiny c) from reaching
// exp. Both sides are computed and one selected: no branch in the key loop.
float softcap(float e, float c) {
    float x = e / c;
    float x2 = x * x;
    float small = e * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0)))));
    return abs(x) < 0.3 ? small : c * tanh(clamp(x, -10.0, 10.0));
}

// scoreWith is the score of key j for query row `row` of query head `head`
// (ALiBi slope `slope`) whose dot product with the key is qk: -inf when
// the key is at or past keyEnd or masked. Where the caller read the
// additive or boolean mask itself (given: their FLAG_MASK and
// FLAG_BOOLMASK bits, a constant at each call), givenSum is their sum.
float scoreWith(float qk, int given, float givenSum, int row, int head, float slope, int j, int keyEnd) {
    int jc = min(j, S - 1); // clamp so loads stay in bounds; masked below
    bool ok = j < keyEnd;
    if ((flags & FLAG_CAUSAL) != 0) {
        ok = ok && j <= row + shift;
    }
    // MASKED (a specialization constant) has the FLAG_* bit of each mask
    // the kernel is compiled to read; the others' loads are compiled out.
    float add = givenSum;
    if ((MASKED & ~given & FLAG_MASK) != 0 && (flags & FLAG_MASK) != 0) {
        add += LOAD_M(maskOffset() + b * P.mStride.x + head * P.mStride.y + row * P.mStride.z + jc * P.mStride.w);
    }
    if ((MASKED & ~given & FLAG_BOOLMASK) != 0 && (flags & FLAG_BOOLMASK) != 0) {
        add += LOAD_B(boolMaskOffset() + b * P.bStride.x + head * P.bStride.y + row * P.bStride.z + jc * P.bStride.w);
    }
    if ((MASKED & FLAG_KEYPAD) != 0 && (flags & FLAG_KEYPAD) != 0) {
        add += LOAD_PAD((firstItem() + b) * S + jc);
    }
    // The dot product of the stored values, scaled once: equal dot
    // products give equal scores (SEMANTICS.md §8, exact ties). Scores
    // stay in natural units; only differences from the running max go
    // to base 2, so a finite mask as large as float32 allows (-FLT_MAX,
    // as models save "blocked") never overflows to -inf.
    float e = qk * scoreScale();
    if ((VARIANTS & VAR_SOFTCAP) != 0) {
        e = softcap(e, softcapLimit());
    }
    // Window and ALiBi positions are bottom-right aligned: query row t
    // sits at key position t + S - L (positionShift() holds S - L plus the
    // chunk's first row).
    int pos = row + posShift;
    if ((VARIANTS & VAR_ALIBI) != 0) {
        e += slope * float(j - pos);
    }
    if ((VARIANTS & VAR_WINDOW) != 0) {
        ok = ok && (windowLeft() < 0 || pos - j <= windowLeft()) && (windowRight() < 0 || j - pos <= windowRight());
    }
    e += add;
    return (ok && e != NEG_INF) ? e : NEG_INF;
}

// scoreOf is scoreWith reading the additive mask itself.
float scoreOf(float qk, int row, int head, float slope, int j, int keyEnd) {
    return scoreWith(qk, 0, 0.0, row, head, slope, j, keyEnd);
}

// slopeOf is query head h's ALiBi slope (0 without ALiBi).
float slopeOf(int h) {
    return (VARIANTS & VAR_ALIBI) != 0 ? alibiSlopeOf(h) : 0.0;
}

// keyRange narrows [keyBegin, keyEnd) to the keys some query row in
// [firstRow, lastRow] can see (causal mask, window): tiles outside are
// never loaded.
void keyRange(int firstRow, int lastRow, inout int keyBegin, inout int keyEnd) {
    if ((flags & FLAG_CAUSAL) != 0) {
        keyEnd = clamp(lastRow + shift + 1, 0, keyEnd);
    }
    if ((VARIANTS & VAR_WINDOW) != 0) {
        if (windowRight() >= 0) {
            keyEnd = clamp(lastRow + posShift + windowRight() + 1, 0, keyEnd);
        }
        if (windowLeft() >= 0) {
            keyBegin = clamp(firstRow + posShift - windowLeft(), keyBegin, max(keyEnd, keyBegin));
        }
    }
}
