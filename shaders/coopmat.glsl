// The preamble of the kernels on the matrix units (VK_KHR_cooperative_matrix:
// attention_coopmat.comp, linear_coopmat.comp), included first: the
// extensions, the interface and the workgroup size, the matrix types of
// float16 inputs and float32 accumulators (MM x MM, MM a kernel's
// specialization constant), and the float16 staging of rows in shared
// memory.
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#include "interface.glsl"

layout(local_size_x_id = 0) in;

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, MM, MM, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, MM, MM, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, MM, MM, gl_MatrixUseAccumulator>

// MUL_ADD_BLOCKS adds to the accumulator acc the products of n pairs of
// MM x MM blocks in shared memory: A's block kk from element aAt + kk *
// aStep of aS (row-major, rows aStride apart), B's from bAt + kk * bStep
// of bS (layout bLayout, stride bStride).
#define MUL_ADD_BLOCKS(acc, n, aS, aAt, aStep, aStride, bS, bAt, bStep, bStride, bLayout)             \
    [[unroll]] for (int kk_ = 0; kk_ < (n); kk_++) {                                                 \
        MAT_A a_;                                                                                    \
        MAT_B b_;                                                                                    \
        coopMatLoad(a_, aS, (aAt) + kk_ * (aStep), aStride, gl_CooperativeMatrixLayoutRowMajor);     \
        coopMatLoad(b_, bS, (bAt) + kk_ * (bStep), bStride, bLayout);                                \
        acc = coopMatMulAdd(a_, b_, acc);                                                            \
    }

// STORE_HALF4 writes the four elements of vec4 v4 into dst from element i
// on, as float16.
#define STORE_HALF4(dst, i, v4)           \
    dst[(i)] = float16_t((v4).x);         \
    dst[(i) + 1] = float16_t((v4).y);     \
    dst[(i) + 2] = float16_t((v4).z);     \
    dst[(i) + 3] = float16_t((v4).w);
