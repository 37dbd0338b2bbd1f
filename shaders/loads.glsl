// Row loads shared by the kernels that read float rows four at a time.
// Before including, a shader defines TEXEL_LOADS (inputs are uniform texel
// buffers) or not (std430 storage buffers), and VEC4_LOADS (rows are read as
// vec4s: widths, offsets and strides are multiples of 4) or not.
//
// LOAD4(buf, base, c, n) is vec4 slot c of the row of width n that starts at
// element base; lanes past the row read as zero.
#ifdef VEC4_LOADS
#ifdef TEXEL_LOADS
#define ROW4(buf, base, c) texelFetch(buf, ((base) >> 2) + (c))
#else
#define ROW4(buf, base, c) buf[((base) >> 2) + (c)]
#endif
#define LOAD4(buf, base, c, n) ((4 * (c) < (n)) ? ROW4(buf, base, c) : vec4(0.0))
#else
#ifdef TEXEL_LOADS
#define AT(buf, i) texelFetch(buf, (i)).r
#else
#define AT(buf, i) buf[(i)]
#endif
// Indexes are clamped into the row so every load is in bounds.
#define AT_CLAMPED(buf, base, i, n) ((i) < (n) ? AT(buf, (base) + min((i), (n) - 1)) : 0.0)
#define LOAD4(buf, base, c, n) vec4(AT_CLAMPED(buf, base, 4 * (c), n), AT_CLAMPED(buf, base, 4 * (c) + 1, n), \
                                    AT_CLAMPED(buf, base, 4 * (c) + 2, n), AT_CLAMPED(buf, base, 4 * (c) + 3, n))
#endif
