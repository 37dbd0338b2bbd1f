// The Params block shared by the attention kernels (attention.comp,
// attention_combine.comp); pipelines/attention.go encodes it.
// All strides and offsets are in elements. A stride of 0 broadcasts.
#include "interface.glsl"

layout(std140, binding = BIND_PARAMS) uniform Params {
    ivec4 dims;     // L, S, d_k, d_v
    ivec4 heads;    // B (of this chunk), group = H / H_kv, flags, causal shift (0 top-left, S-L bottom-right)
    ivec4 offsets;  // Q, K, V, O element offsets
    ivec4 qStride;  // b, h, l (last axis contiguous)
    ivec4 kStride;  // b, h_kv, s
    ivec4 vStride;  // b, h_kv, s
    ivec4 oStride;  // b, h, l
    ivec4 mStride;  // additive mask b, h, l, s
    ivec4 bStride;  // boolean mask b, h, l, s
    vec4 scaling;   // x = scale (1 for additive scores)
    ivec4 split;    // split-K: splits, keys per split, row blocks per KV head, query heads
    // A call too large for one binding runs as chunks of batch items and
    // KV heads, each bound through its own buffer windows: element offsets
    // of the additive and boolean masks in their windows, the chunk's first
    // batch item and the call's batch size (for lengths and key padding).
    ivec4 chunk;
    // Element offsets of the chunk's log-sum-exp and weights in their
    // windows (a window starts at the binding's offset alignment, which
    // need not be where the chunk's rows start); the call's query rows L
    // (the rows of a head in LSE and weights); the chunk's first query row
    // (a chunk may hold a block of one head's rows; dims.x is its rows).
    ivec4 outs;
    // The sliding window (SEMANTICS.md §4.1): left, right (-1: unbounded),
    // the bottom-right position shift of the chunk's rows (its first row
    // plus S - L), the chunk's first query head (for per-head data).
    ivec4 window;
    vec4 variant; // x: the soft-cap c (0: none)
    ivec4 page;   // paged K/V: positions per page, page-table entries per item
    // The backward passes: element offsets of the chunk's dO, dQ, dK and
    // dV in their windows (D and the sink shares share the LSE's, dw_a's
    // shares dK's).
    ivec4 grads;
} P;

// Named reads of the members packed into the ivec4s above: kernels call
// these, and the slot letters stay in this file.
int rowsL() { return P.dims.x; }          // the chunk's query rows
int keysS() { return P.dims.y; }          // key positions S
int widthK() { return P.dims.z; }         // d_k
int widthV() { return P.dims.w; }         // d_v
int qOffset() { return P.offsets.x; }     // element offsets of Q, K, V and O (strides: the *Stride
int kOffset() { return P.offsets.y; }     // members, x, y, z over b, h, l or s)
int vOffset() { return P.offsets.z; }
int oOffset() { return P.offsets.w; }
int chunkBatch() { return P.heads.x; }     // the chunk's batch items
int headGroup() { return P.heads.y; }      // query heads a KV head serves, H / H_kv
int paramFlags() { return P.heads.z; }     // FLAG_* bits
int causalShift() { return P.heads.w; }    // key j is visible to row t when j <= t + shift
int maskOffset() { return P.chunk.x; }     // the additive mask's element offset in its window
int boolMaskOffset() { return P.chunk.y; } // the folded boolean masks', likewise
int firstItem() { return P.chunk.z; }      // the chunk's first batch item
int callBatch() { return P.chunk.w; }      // the call's batch size (query lengths follow the key lengths)
int lseOffset() { return P.outs.x; }       // the chunk's LSE element offset in its window
int weightsOffset() { return P.outs.y; }   // the chunk's weights element offset in its window
int callRows() { return P.outs.z; }        // the call's query rows L (a head's rows in LSE and weights)
int chunkFirstRow() { return P.outs.w; }   // the chunk's first query row
int windowLeft() { return P.window.x; }    // keys at most this far left of a row's position (-1: unbounded)
int windowRight() { return P.window.y; }   // keys at most this far right (-1: unbounded)
int positionShift() { return P.window.z; } // the chunk's rows' bottom-right position shift
int firstHead() { return P.window.w; }     // the chunk's first query head
float scoreScale() { return P.scaling.x; }
float softcapLimit() { return P.variant.x; } // the soft-cap c (0: none)
int pageSize() { return P.page.x; }          // paged K/V: positions per page
int pagesPerItem() { return P.page.y; }      // page-table entries per batch item
int splitCount() { return P.split.x; }       // split-K: key splits
int splitKeys() { return P.split.y; }        // split-K: keys per split
int rowBlocks() { return P.split.z; }        // row blocks per KV head
int queryHeads() { return P.split.w; }       // the call's query heads H
int dOOffset() { return P.grads.x; }         // the backward: the chunk's dO, dQ, dK and dV element offsets
int dQOffset() { return P.grads.y; }
int dKOffset() { return P.grads.z; }
int dVOffset() { return P.grads.w; }

// Per-head data (BIND_HEADS, CBIND_HEADS: the kernel declares headData):
// query head h's sink logit and ALiBi slope, h counted from firstHead().
#define sinkOf(h) headData[HEAD_SLOTS * (firstHead() + (h)) + HEAD_SINK]
#define alibiSlopeOf(h) headData[HEAD_SLOTS * (firstHead() + (h)) + HEAD_SLOPE]
