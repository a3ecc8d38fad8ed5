/* tests/ref_ops.c — float64 naive references of model/ops.h (contracts in tests/ref_ops.h).
 *
 * Plain loops in double, sums in index order, no threads, no BLAS: slow and obviously the math.
 * Used by tests/test_ops.c against the fp32 CPU ops and by the whole-model float64 reference.
 * Owns nothing else; never calls the code under test.
 */
#include <math.h>
#include <string.h>
#include "tests/ref_ops.h"

int ref_dropout_keep(uint64_t seed, uint32_t g, uint32_t t, uint32_t c, Dropout drop) {
    if (!dropout_active(drop)) return 1;
    return philox_elem_draw(seed, g, t, c) >= drop.thr;
}

/* the dropout of element (g, t, c): 0 or scale */
static double ref_dropout_factor(uint64_t seed, uint32_t g, uint32_t t, uint32_t c, Dropout drop) {
    return ref_dropout_keep(seed, g, t, c, drop) ? (double)drop.scale : 0.0;
}

/* ---- embedding ---------------------------------------------------------------------------- */

void ref_encoder_forward(double* out, const int* inp, const double* wte, const double* wpe,
                         int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const double* e = wte + (size_t)inp[b * T + t] * C;
            const double* p = wpe + (size_t)t * C;
            double* o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) {
                o[c] = (e[c] + p[c]) * ref_dropout_factor(embd_seed, g0 + (uint32_t)b,
                                                          (uint32_t)t, (uint32_t)c, drop);
            }
        }
    }
}

void ref_encoder_backward(double* dwte, double* dwpe, const double* dout, const int* inp,
                          int B, int T, int C) {
    /* in the forward, out[b,t] = wte[inp[b,t]] + wpe[t]: each row's gradient flows to both */
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const double* d = dout + ((size_t)b * T + t) * C;
            double* dw = dwte + (size_t)inp[b * T + t] * C;
            double* dp = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) { dw[c] += d[c]; dp[c] += d[c]; }
        }
    }
}

/* ---- layernorm ---------------------------------------------------------------------------- */

void ref_layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                           const double* weight, const double* bias, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* x = inp + (size_t)n * C;
        double m = 0.0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        double var = 0.0;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= C;
        double s = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void ref_layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                            const double* inp, const double* weight, const double* mean,
                            const double* rstd, int N, int C) {
    /* in the forward, out = norm * w + b with norm = (x - mean) * rstd; mean and rstd depend on
     * every x of the row, which gives dx = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)),
     * dnorm = dout * w. */
    for (int n = 0; n < N; n++) {
        const double* x = inp + (size_t)n * C;
        const double* d = dout + (size_t)n * C;
        double a = 0.0, bsum = 0.0;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - mean[n]) * rstd[n];
            a += d[c] * weight[c];
            bsum += d[c] * weight[c] * norm;
        }
        a /= C;
        bsum /= C;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - mean[n]) * rstd[n];
            dinp[(size_t)n * C + c] += rstd[n] * (d[c] * weight[c] - a - norm * bsum);
            dweight[c] += d[c] * norm;
            dbias[c] += d[c];
        }
    }
}

/* ---- matmul ------------------------------------------------------------------------------- */

void ref_matmul_forward(double* out, const double* inp, const double* weight, const double* bias,
                        int N, int C, int OC) {
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < OC; k++) {
            double s = bias != NULL ? bias[k] : 0.0;
            for (int c = 0; c < C; c++) s += inp[(size_t)n * C + c] * weight[(size_t)k * C + c];
            out[(size_t)n * OC + k] = s;
        }
    }
}

void ref_matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                         const double* inp, const double* weight, int N, int C, int OC) {
    /* in the forward, out[n,k] = bias[k] + sum_c inp[n,c] weight[k,c] */
    if (dinp != NULL) {
        for (int n = 0; n < N; n++) {
            for (int c = 0; c < C; c++) {
                double s = 0.0;
                for (int k = 0; k < OC; k++) s += dout[(size_t)n * OC + k] * weight[(size_t)k * C + c];
                dinp[(size_t)n * C + c] = s;
            }
        }
    }
    for (int k = 0; k < OC; k++) {
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + k] * inp[(size_t)n * C + c];
            dweight[(size_t)k * C + c] += s;
        }
        if (dbias != NULL) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + k];
            dbias[k] += s;
        }
    }
}

/* ---- GELU --------------------------------------------------------------------------------- */

#define REF_GELU_K 0.7978845608028654   /* sqrt(2 / pi) */

void ref_gelu_forward(double* out, const double* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(REF_GELU_K * (x + 0.044715 * x * x * x)));
    }
}

void ref_gelu_backward(double* dinp, const double* inp, const double* dout, size_t n) {
    /* d/dx [x/2 (1 + tanh u)] = (1 + tanh u)/2 + x/2 sech^2(u) du/dx, u = k (x + 0.044715 x^3) */
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double u = REF_GELU_K * (x + 0.044715 * x * x * x);
        double th = tanh(u);
        double du = REF_GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        double local = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
        dinp[i] = local * dout[i];
    }
}

/* ---- residual + dropout ------------------------------------------------------------------- */

void ref_residual_dropout_forward(double* out, const double* x, const double* branch,
                                  int B, int T, int C, uint32_t g0, uint64_t seed, Dropout drop) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                out[i] = x[i] + branch[i] * ref_dropout_factor(seed, g0 + (uint32_t)b, (uint32_t)t,
                                                               (uint32_t)c, drop);
            }
        }
    }
}

void ref_dropout_backward(double* dy, const double* dout, int B, int T, int C, uint32_t g0,
                          uint64_t seed, Dropout drop) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                dy[i] = dout[i] * ref_dropout_factor(seed, g0 + (uint32_t)b, (uint32_t)t,
                                                     (uint32_t)c, drop);
            }
        }
    }
}

/* ---- cross-entropy ------------------------------------------------------------------------ */

/* log sum_v exp(l[v]) over the real vocab, shifted by the max for range */
static double ref_logsumexp(const double* l, int V) {
    double maxv = -INFINITY;
    for (int v = 0; v < V; v++) if (l[v] > maxv) maxv = l[v];
    double s = 0.0;
    for (int v = 0; v < V; v++) s += exp(l[v] - maxv);
    return maxv + log(s);
}

void ref_crossentropy_forward(double* losses, const double* logits, const int* targets,
                              int N, int V, int Vp) {
    for (int n = 0; n < N; n++) {
        const double* l = logits + (size_t)n * Vp;
        losses[n] = ref_logsumexp(l, V) - l[targets[n]];
    }
}

void ref_crossentropy_backward(double* logits, const int* targets, double dloss,
                               int N, int V, int Vp) {
    for (int n = 0; n < N; n++) {
        double* l = logits + (size_t)n * Vp;
        double lse = ref_logsumexp(l, V);
        for (int v = 0; v < V; v++) l[v] = dloss * (exp(l[v] - lse) - (v == targets[n] ? 1.0 : 0.0));
        for (int v = V; v < Vp; v++) l[v] = 0.0;
    }
}

/* ---- norms and the optimizer -------------------------------------------------------------- */

double ref_sum_squares(const double* x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

void ref_scale_inplace(double* x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void ref_adamw_update(double* params, const double* grads, double* m, double* v, size_t n,
                      double lr, double beta1, double beta2, double eps, double weight_decay, int t) {
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    for (size_t i = 0; i < n; i++) {
        double g = grads[i];
        m[i] = beta1 * m[i] + (1.0 - beta1) * g;
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
        double mhat = m[i] / bc1, vhat = v[i] / bc2;
        params[i] = params[i] * (1.0 - lr * weight_decay) - lr * mhat / (sqrt(vhat) + eps);
    }
}

void ref_rope_forward(double* qkv, int B, int T, int NH, int NKV, int HD, int base, int layout,
                      int pos0) {
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++) {
                double* x = qkv + ((size_t)b * T + t) * QKV + (size_t)h * HD;
                for (int d = 0; d < HD / 2; d++) {
                    double a = (double)(pos0 + t) * pow((double)base, -2.0 * d / HD);
                    int i0 = layout == 1 ? 2 * d : d, i1 = layout == 1 ? 2 * d + 1 : d + HD / 2;
                    double x0 = x[i0], x1 = x[i1];
                    x[i0] = x0 * cos(a) - x1 * sin(a);
                    x[i1] = x0 * sin(a) + x1 * cos(a);
                }
            }
}
