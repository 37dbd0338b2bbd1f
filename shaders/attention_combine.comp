#version 450
#extension GL_GOOGLE_include_directive : require
// Combine pass of split-K attention (flash-decoding): merges the partial
// (max, sum, unnormalised output) of every key split of a query row into the
// final output row and log-sum-exp. A workgroup per (batch, head, row): its
// lanes take the splits in turn for the max and the sum (reduced in shared
// memory), then the output elements (coalesced reads of the partials), so
// a decode step's few rows still spread over many compute units.

const int LANES = 64;
layout(local_size_x = LANES) in;
shared float reduced[LANES];

// workgroupMax and workgroupSum reduce one value per lane over the
// workgroup (every lane gets the result).
float workgroupMax(float x) {
    int lane = int(gl_LocalInvocationID.x);
    reduced[lane] = x;
    barrier();
    for (int o = LANES / 2; o > 0; o /= 2) {
        if (lane < o) {
            reduced[lane] = max(reduced[lane], reduced[lane + o]);
        }
        barrier();
    }
    float r = reduced[0];
    barrier();
    return r;
}

float workgroupSum(float x) {
    int lane = int(gl_LocalInvocationID.x);
    reduced[lane] = x;
    barrier();
    for (int o = LANES / 2; o > 0; o /= 2) {
        if (lane < o) {
            reduced[lane] += reduced[lane + o];
        }
        barrier();
    }
    float r = reduced[0];
    barrier();
    return r;
}

#include "attention_params.glsl"
#include "softmax.glsl" // the partials' maxima are in natural units

layout(std430, binding = CBIND_PARTIALS) readonly buffer Partials { float part[]; };
layout(std430, binding = CBIND_O) writeonly buffer OBuf { float oData[]; };
layout(std430, binding = CBIND_LSE) writeonly buffer LseBuf { float lseData[]; };
layout(std430, binding = CBIND_LENGTHS) readonly buffer Lengths { int lengths[]; }; // as attention.comp's
layout(std430, binding = CBIND_HEADS) readonly buffer HeadBuf { float headData[]; }; // sinkOf(h): pipelines/options.go

void main() {
    int L = rowsL();
    int DV = widthV();
    int B = chunkBatch();
    int H = queryHeads(); // query heads
    int splits = splitCount();
    // Rows past the x axis's limit continue on y.
    int row = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
    if (row >= B * H * L) {
        return; // the whole workgroup: no barrier is left waiting
    }
    int lane = int(gl_LocalInvocationID.x);
    int t = row % L;
    int h = (row / L) % H;
    int b = row / (L * H);
    int base = row * splits * (DV + 2);

    float mMax = NEG_INF;
    for (int s = lane; s < splits; s += LANES) {
        mMax = max(mMax, part[base + s * (DV + 2)]);
    }
    mMax = workgroupMax(mMax);
    // Splits that saw no visible key hold max -inf and sum 0; when every
    // split is like that the row is fully masked: zeros and -inf.
    float sum = 0.0;
    for (int s = lane; s < splits; s += LANES) {
        float m = part[base + s * (DV + 2)];
        if (m != NEG_INF) {
            sum += part[base + s * (DV + 2) + 1] * exp2((m - mMax) * LOG2E);
        }
    }
    sum = workgroupSum(sum);
    int queryLen = (paramFlags() & FLAG_LENGTHS) != 0 ? lengths[callBatch() + firstItem() + b] : callRows();
    if ((paramFlags() & FLAG_SINKS) != 0 && chunkFirstRow() + t < queryLen) {
        // The sink joins the denominator only; the outputs below are then
        // summed relative to the new maximum.
        foldSink(mMax, sum, sinkOf(h));
    }
    float inv = sum > 0.0 ? 1.0 / sum : 0.0;
    int oBase = oOffset() + b * P.oStride.x + h * P.oStride.y + t * P.oStride.z;
    for (int i = lane; i < DV; i += LANES) {
        float o = 0.0;
        for (int s = 0; s < splits; s++) {
            float m = part[base + s * (DV + 2)];
            if (m != NEG_INF) {
                o += part[base + s * (DV + 2) + 2 + i] * exp2((m - mMax) * LOG2E);
            }
        }
        oData[oBase + i] = o * inv;
    }
    if ((paramFlags() & FLAG_LSE) != 0 && lane == 0) {
        lseData[lseOffset() + row] = lseOf(mMax, sum);
    }
}
