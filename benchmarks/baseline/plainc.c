/* A plain-C fp32 Llama decoder in the llama2.c style: one token at a time, loops the compiler
 * vectorises, OpenMP over the rows of each matrix-vector product, weights memory-mapped from a
 * llama2.c "v0" checkpoint. It is the floor a dedicated engine has to beat at batch 1.
 *
 *   gcc -O3 -ffast-math -march=native -fopenmp plainc.c -lm -o plainc
 *   OMP_NUM_THREADS=2 ./plainc model.bin PROMPT_TOKENS DECODE_TOKENS
 *
 * The prompt is PROMPT_TOKENS pseudo-random ids fed one by one (no batched prefill), then
 * DECODE_TOKENS greedy steps. Prints one JSON line: prefill and decode tokens/s, time to first
 * token. Written for the decodelab benchmarks; checks the header, not a general tool. */
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  int dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
} Config;

typedef struct {
  const float *embed, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
} Weights;

static double now(void) { return omp_get_wtime(); }

static void rmsnorm(float* o, const float* x, const float* w, int n) {
  float ss = 0.0f;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  ss = 1.0f / sqrtf(ss / n + 1e-5f);
  for (int i = 0; i < n; i++) o[i] = w[i] * (ss * x[i]);
}

/* y (d) = W (d, n) x (n) */
static void matvec(float* y, const float* x, const float* w, int n, int d) {
  int i;
#pragma omp parallel for private(i)
  for (i = 0; i < d; i++) {
    const float* row = w + (size_t)i * n;
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += row[j] * x[j];
    y[i] = s;
  }
}

static void softmax(float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  float s = 0.0f;
  for (int i = 0; i < n; i++) {
    x[i] = expf(x[i] - mx);
    s += x[i];
  }
  for (int i = 0; i < n; i++) x[i] /= s;
}

// This process's peak resident set in KiB (Linux VmHWM), or -1 where it cannot be read.
static long peak_rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  fclose(f);
  return kib;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s model.bin PROMPT_TOKENS DECODE_TOKENS\n", argv[0]);
    return 2;
  }
  int fd = open(argv[1], O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Config)) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  const float* data = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  Config c;
  memcpy(&c, data, sizeof c);
  const int shared = c.vocab > 0;
  c.vocab = abs(c.vocab);
  const int P = atoi(argv[2]), N = atoi(argv[3]);
  if (P < 1 || N < 1 || P + N > c.seq_len || c.n_heads % c.n_kv_heads || c.dim % c.n_heads) {
    fprintf(stderr, "bad header or lengths (seq_len %d)\n", c.seq_len);
    return 1;
  }
  const int hd = c.dim / c.n_heads, kv_dim = hd * c.n_kv_heads, L = c.n_layers, D = c.dim, H = c.hidden;
  const size_t need = 7 * 4 + 4 * ((size_t)c.vocab * D + 2 * (size_t)L * D + (size_t)L * D * (D + 2 * kv_dim + D) +
                                   3 * (size_t)L * D * H + D + (size_t)c.seq_len * hd + (shared ? 0 : (size_t)c.vocab * D));
  if ((size_t)st.st_size < need) {
    fprintf(stderr, "file has %lld bytes, the header implies %zu\n", (long long)st.st_size, need);
    return 1;
  }
  Weights w;
  const float* p = data + 7;
  w.embed = p; p += (size_t)c.vocab * D;
  w.rms_att = p; p += (size_t)L * D;
  w.wq = p; p += (size_t)L * D * D;
  w.wk = p; p += (size_t)L * D * kv_dim;
  w.wv = p; p += (size_t)L * D * kv_dim;
  w.wo = p; p += (size_t)L * D * D;
  w.rms_ffn = p; p += (size_t)L * D;
  w.w1 = p; p += (size_t)L * D * H;
  w.w2 = p; p += (size_t)L * H * D;
  w.w3 = p; p += (size_t)L * D * H;
  w.rms_final = p; p += D;
  p += (size_t)c.seq_len * hd; /* unused RoPE tables */
  w.wcls = shared ? w.embed : p;

  float *x = calloc(D, 4), *xb = calloc(D, 4), *xb2 = calloc(D, 4), *hb = calloc(H, 4), *hb2 = calloc(H, 4),
        *q = calloc(D, 4), *att = calloc((size_t)c.n_heads * c.seq_len, 4), *logits = calloc(c.vocab, 4);
  float* kc = calloc((size_t)L * c.seq_len * kv_dim, 4);
  float* vc = calloc((size_t)L * c.seq_len * kv_dim, 4);
  const int group = c.n_heads / c.n_kv_heads;

  unsigned rng = 12345u;
  int token = 1;
#pragma omp parallel
  { /* start the thread team before the clock */
  }
  double t_start = now(), t_first = 0.0;
  for (int pos = 0; pos < P + N; pos++) {
    memcpy(x, w.embed + (size_t)token * D, D * 4);
    for (int l = 0; l < L; l++) {
      float* k = kc + ((size_t)l * c.seq_len + pos) * kv_dim;
      float* v = vc + ((size_t)l * c.seq_len + pos) * kv_dim;
      rmsnorm(xb, x, w.rms_att + (size_t)l * D, D);
      matvec(q, xb, w.wq + (size_t)l * D * D, D, D);
      matvec(k, xb, w.wk + (size_t)l * D * kv_dim, D, kv_dim);
      matvec(v, xb, w.wv + (size_t)l * D * kv_dim, D, kv_dim);
      for (int i = 0; i < D; i += 2) { /* interleaved RoPE */
        const float f = 1.0f / powf(10000.0f, (float)(i % hd) / hd), a = pos * f, cs = cosf(a), sn = sinf(a);
        for (int which = 0; which < (i < kv_dim ? 2 : 1); which++) {
          float* u = which == 0 ? q : k;
          const float u0 = u[i], u1 = u[i + 1];
          u[i] = u0 * cs - u1 * sn;
          u[i + 1] = u0 * sn + u1 * cs;
        }
      }
      int h;
#pragma omp parallel for private(h)
      for (h = 0; h < c.n_heads; h++) {
        const float* qh = q + h * hd;
        float* a = att + (size_t)h * c.seq_len;
        const size_t off = (size_t)(h / group) * hd;
        for (int t = 0; t <= pos; t++) {
          const float* kt = kc + ((size_t)l * c.seq_len + t) * kv_dim + off;
          float s = 0.0f;
          for (int i = 0; i < hd; i++) s += qh[i] * kt[i];
          a[t] = s / sqrtf((float)hd);
        }
        softmax(a, pos + 1);
        float* o = xb + h * hd;
        memset(o, 0, hd * 4);
        for (int t = 0; t <= pos; t++) {
          const float* vt = vc + ((size_t)l * c.seq_len + t) * kv_dim + off;
          for (int i = 0; i < hd; i++) o[i] += a[t] * vt[i];
        }
      }
      matvec(xb2, xb, w.wo + (size_t)l * D * D, D, D);
      for (int i = 0; i < D; i++) x[i] += xb2[i];
      rmsnorm(xb, x, w.rms_ffn + (size_t)l * D, D);
      matvec(hb, xb, w.w1 + (size_t)l * D * H, D, H);
      matvec(hb2, xb, w.w3 + (size_t)l * D * H, D, H);
      for (int i = 0; i < H; i++) hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];
      matvec(xb, hb, w.w2 + (size_t)l * D * H, H, D);
      for (int i = 0; i < D; i++) x[i] += xb[i];
    }
    rmsnorm(x, x, w.rms_final, D);
    matvec(logits, x, w.wcls, D, c.vocab);
    if (pos < P - 1) { /* next prompt token */
      rng = rng * 1664525u + 1013904223u;
      token = 3 + (int)(rng % (unsigned)(c.vocab - 3));
    } else {
      int best = 0;
      for (int i = 1; i < c.vocab; i++) best = logits[i] > logits[best] ? i : best;
      token = best;
      if (pos == P - 1) t_first = now();
    }
  }
  const double t_end = now();
  printf("{\"prefill_tok_s\": %.3f, \"decode_tok_s\": %.3f, \"ttft_s\": %.6f, \"last_token\": %d, "
         "\"peak_rss_kib\": %ld}\n",
         P / (t_first - t_start), N / (t_end - t_first), /* N forward passes after the first token */
         t_first - t_start, token, peak_rss_kib());
  return 0;
}
