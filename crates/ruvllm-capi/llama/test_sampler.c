/* Checks the llama.cpp sampler's contract on the real model's vocabulary, without
 * decoding: apply() masks by token id whatever the candidates' order, accept() advances,
 * clone() copies the state, reset() starts over, and a stopped matcher allows EOS only.
 *
 *   test_sampler MODEL.gguf     (exit 0 when every check passes)
 * Run by crates/ruvllm-py/tests/test_capi_llamacpp.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "ruvllm.h"
#include "ruvllm_llama.h"

static int failures = 0;
#define CHECK(c)                                                     \
    do {                                                             \
        if (!(c)) {                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                              \
        }                                                            \
    } while (0)

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void)level;
    (void)text;
    (void)data;
}

/* Applies `s` to every token id, in the order `order`, and returns how many survive;
 * `alive[id]` says which. */
static int survivors(struct llama_sampler *s, const llama_token *order, int n, char *alive) {
    llama_token_data *d = malloc(sizeof *d * (size_t)n);
    for (int i = 0; i < n; i++) d[i] = (llama_token_data){order[i], 0.0f, 0.0f};
    llama_token_data_array a = {d, (size_t)n, -1, false};
    llama_sampler_apply(s, &a);
    int k = 0;
    for (int i = 0; i < n; i++) {
        alive[d[i].id] = !isinf(d[i].logit);
        k += alive[d[i].id];
    }
    free(d);
    return k;
}

int main(int argc, char **argv) {
    if (argc < 2) return 1;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (model == NULL) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n = llama_vocab_n_tokens(vocab);
    char err[256];
    RuvllmVocabulary *v = ruvllm_llama_vocabulary(vocab, err, sizeof err);
    CHECK(v != NULL);
    if (v == NULL) return 1;
    CHECK((int)ruvllm_vocabulary_n_vocab(v) == n);
    RuvllmEngine *e = ruvllm_engine_new(v);
    RuvllmGrammar *g = ruvllm_grammar_compile(e, RUVLLM_KIND_REGEX, "(yes|no)!", NULL, err, sizeof err);
    CHECK(g != NULL);
    CHECK(ruvllm_llama_sampler_init(NULL, -1) == NULL);
    struct llama_sampler *s = ruvllm_llama_sampler_init(g, -1);
    ruvllm_grammar_free(g); /* the sampler keeps its own reference */
    CHECK(strcmp(llama_sampler_name(s), "ruvllm") == 0);
    CHECK(ruvllm_llama_sampler_matcher(s) != NULL);

    llama_token *fwd = malloc(sizeof *fwd * (size_t)n), *rev = malloc(sizeof *rev * (size_t)n);
    for (int i = 0; i < n; i++) fwd[i] = i, rev[i] = n - 1 - i;
    char *a = calloc((size_t)n, 1), *b = calloc((size_t)n, 1);

    /* By id, not by position: the same tokens survive in either order. */
    int k = survivors(s, fwd, n, a);
    CHECK(k > 0 && k < 200);
    CHECK(survivors(s, rev, n, b) == k && memcmp(a, b, (size_t)n) == 0);
    /* The first token of "yes" survives. */
    llama_token yes[8];
    int ny = llama_tokenize(vocab, "yes", 3, yes, 8, false, false);
    CHECK(ny >= 1 && a[yes[0]]);

    /* accept advances; a clone keeps the state; reset starts over. */
    for (int i = 0; i < ny; i++) llama_sampler_accept(s, yes[i]);
    struct llama_sampler *c = llama_sampler_clone(s);
    CHECK(c != NULL && ruvllm_llama_sampler_matcher(c) != ruvllm_llama_sampler_matcher(s));
    int k1 = survivors(s, fwd, n, a);
    int k2 = survivors(c, rev, n, b);
    CHECK(k1 == k2 && memcmp(a, b, (size_t)n) == 0);
    llama_token bang[4];
    CHECK(llama_tokenize(vocab, "!", 1, bang, 4, false, false) == 1);
    CHECK(a[bang[0]]);
    llama_sampler_accept(c, bang[0]);
    CHECK(ruvllm_matcher_is_accepting(ruvllm_llama_sampler_matcher(c)));
    /* After the text is complete only EOG tokens survive. */
    int ke = survivors(c, fwd, n, b);
    for (int i = 0; i < n; i++)
        if (b[i]) CHECK(llama_vocab_is_eog(vocab, i));
    CHECK(ke >= 1);
    /* A refused token puts the matcher in error: EOS only, and the error says why. */
    llama_sampler_accept(s, yes[0]);
    CHECK(ruvllm_matcher_get_error(ruvllm_llama_sampler_matcher(s)) != NULL);
    CHECK(survivors(s, rev, n, a) == ke);
    llama_sampler_reset(s);
    CHECK(ruvllm_matcher_get_error(ruvllm_llama_sampler_matcher(s)) == NULL);
    CHECK(survivors(s, fwd, n, a) == k);
    /* Ids outside the vocabulary are masked, never read past the row. */
    llama_token odd[3] = {-5, n, n + 1000};
    CHECK(survivors(s, odd, 0, a) == 0);
    {
        llama_token_data d[3] = {{odd[0], 0, 0}, {odd[1], 0, 0}, {odd[2], 0, 0}};
        llama_token_data_array arr = {d, 3, -1, false};
        llama_sampler_apply(s, &arr);
        CHECK(isinf(d[0].logit) && isinf(d[1].logit) && isinf(d[2].logit));
    }

    llama_sampler_free(c);
    llama_sampler_free(s);
    ruvllm_engine_free(e);
    ruvllm_vocabulary_free(v);
    llama_model_free(model);
    free(fwd), free(rev), free(a), free(b);
    printf("%s: %d tokens, %d allowed at the start, %d failures\n", failures ? "FAIL" : "ok", n, k, failures);
    return failures ? 1 : 0;
}
