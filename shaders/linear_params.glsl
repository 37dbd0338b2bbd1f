// The Params block of the dense layers' forward kernels (linear.comp,
// linear_coopmat.comp); pipelines/linear.go encodes it. Offsets and row
// strides are in elements.
#include "interface.glsl"

layout(std140, binding = LBIND_PARAMS) uniform Params {
    ivec4 dims; // rows M, outputs N, inputs K, flags
    ivec4 x;    // X element offset, row stride
    ivec4 w;    // W element offset, row stride
    ivec4 y;    // Y element offset, row stride; bias element offset
} P;
