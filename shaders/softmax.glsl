// The softmax rules every kernel that keeps a row's running maximum and
// sum follows: the forward kernels (attention_forward.glsl) and the
// split-K combine pass. Written once, so every kernel rounds alike and
// treats a masked key, a row with no visible key and a sink alike.
//
// A row's max m is in natural units (-inf while no key is visible) and its
// sum l is of e^(s - m) over the visible keys; only differences from m go
// to base 2, so a finite mask as large as float32 allows (-FLT_MAX, as
// models save "blocked") never overflows to -inf.

const float LOG2E = 1.4426950408889634;
const float NEG_INF = -1.0 / 0.0;

// expFrom is e^(s - m) for score s of a row whose max is m: 0 for a
// masked key (s = -inf), never exp2(-inf - -inf).
float expFrom(float s, float m) { return s == NEG_INF ? 0.0 : exp2((s - m) * LOG2E); }

// rescale moves a row's running max m to mNew (>= m), scales its sum l to
// it and returns the factor its output accumulator is scaled by. While
// every key so far is masked mNew is -inf: the factor is 1 (never
// exp2(-inf - -inf)), and l and the accumulator are still zero then.
float rescale(inout float m, inout float l, float mNew) {
    float alpha = mNew == NEG_INF ? 1.0 : exp2((m - mNew) * LOG2E);
    m = mNew;
    l *= alpha;
    return alpha;
}

// foldSink joins a sink logit to a finished row's max m and sum l: the
// sink is in the denominator only, m' = max(m, sink) and
// l' = l e^(m - m') + e^(sink - m'). It returns e^(m - m'), the factor the
// row's output is rescaled by (0 when no key was visible).
float foldSink(inout float m, inout float l, float sink) {
    float mNew = max(m, sink);
    float alpha = exp2((m - mNew) * LOG2E);
    l = l * alpha + exp2((sink - mNew) * LOG2E);
    m = mNew;
    return alpha;
}

// lseOf is a finished row's log-sum-exp: -inf for a row with no softmax
// (l = 0: no visible key and no sink, or a padded row).
float lseOf(float m, float l) { return l > 0.0 ? m + log(l) : NEG_INF; }
