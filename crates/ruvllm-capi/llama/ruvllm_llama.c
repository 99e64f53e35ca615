/* The llama.cpp sampler over ruvllm's C ABI (see ruvllm_llama.h). Build it with the
 * application, against llama.h and ruvllm.h; link libllama and libruvllm. */
#include "ruvllm_llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

RuvllmVocabulary *ruvllm_llama_vocabulary(const struct llama_vocab *vocab, char *err, size_t err_len) {
    if (vocab == NULL) {
        if (err != NULL && err_len > 0) snprintf(err, err_len, "vocab is NULL");
        return NULL;
    }
    const int32_t n = llama_vocab_n_tokens(vocab);
    if (n <= 0) {
        if (err != NULL && err_len > 0) snprintf(err, err_len, "the vocabulary has %d tokens", (int)n);
        return NULL;
    }
    uint8_t **pieces = calloc((size_t)n, sizeof *pieces);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    bool *special = calloc((size_t)n, sizeof *special);
    uint32_t *eos = calloc((size_t)n, sizeof *eos);
    size_t n_eos = 0;
    RuvllmVocabulary *v = NULL;
    if (!pieces || !lens || !special || !eos) {
        if (err != NULL && err_len > 0) snprintf(err, err_len, "out of memory");
        goto done;
    }
    char buf[256];
    for (int32_t t = 0; t < n; t++) {
        const enum llama_token_attr attr = llama_vocab_get_attr(vocab, t);
        int32_t len = llama_token_to_piece(vocab, t, buf, (int32_t)sizeof buf, 0, false);
        char *src = buf;
        char *big = NULL;
        if (len < 0) { /* a piece longer than the buffer: ask again with its size */
            big = malloc((size_t)-len);
            if (big == NULL) {
                if (err != NULL && err_len > 0) snprintf(err, err_len, "out of memory");
                goto done;
            }
            len = llama_token_to_piece(vocab, t, big, -len, 0, false);
            src = big;
        }
        if (len > 0) {
            pieces[t] = malloc((size_t)len);
            if (pieces[t] == NULL) {
                free(big);
                if (err != NULL && err_len > 0) snprintf(err, err_len, "out of memory");
                goto done;
            }
            memcpy(pieces[t], src, (size_t)len);
            lens[t] = (size_t)len;
        }
        free(big);
        /* Control and unused tokens, and tokens that write nothing, are never text. */
        special[t] = (attr & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_UNUSED)) != 0 || len <= 0;
        if (llama_vocab_is_eog(vocab, t)) eos[n_eos++] = (uint32_t)t;
    }
    v = ruvllm_vocabulary_from_tokens((const uint8_t *const *)pieces, lens, special, (size_t)n, (size_t)n,
                                      eos, n_eos, err, err_len);
done:
    if (pieces) {
        for (int32_t t = 0; t < n; t++) free(pieces[t]);
    }
    free(pieces);
    free(lens);
    free(special);
    free(eos);
    return v;
}

struct ruvllm_sampler_ctx {
    RuvllmGrammar *grammar;
    RuvllmMatcher *matcher;
    uint32_t *bits;
    size_t words;
    size_t n_vocab;
    int64_t max_tokens; /* < 0: no budget */
    int64_t accepted;
};

static const char *rs_name(const struct llama_sampler *smpl) {
    (void)smpl;
    return "ruvllm";
}

static void rs_accept(struct llama_sampler *smpl, llama_token token) {
    struct ruvllm_sampler_ctx *c = smpl->ctx;
    /* A refused token (one the application forced past the mask) puts the matcher in
     * error: from then on it allows EOS only, and ruvllm_matcher_get_error says why. */
    if (token >= 0) ruvllm_matcher_consume_token(c->matcher, (uint32_t)token);
    c->accepted++;
}

static void rs_apply(struct llama_sampler *smpl, llama_token_data_array *cur_p) {
    struct ruvllm_sampler_ctx *c = smpl->ctx;
    /* The engine's budget counts the tokens before EOS; EOS is one of max_tokens. */
    const int64_t room = c->max_tokens - 1 - c->accepted;
    const int64_t left = c->max_tokens < 0 ? -1 : (room > 0 ? room : 0);
    if (ruvllm_matcher_fill_next_token_bitmask(c->matcher, c->bits, c->words, left) != 0) {
        /* Only a matcher without a grammar fails, which init refuses: allow nothing. */
        memset(c->bits, 0, c->words * sizeof *c->bits);
    }
    for (size_t i = 0; i < cur_p->size; i++) {
        const llama_token id = cur_p->data[i].id;
        const bool ok = id >= 0 && (size_t)id < c->n_vocab && ((c->bits[(size_t)id / 32] >> ((size_t)id % 32)) & 1u);
        if (!ok) cur_p->data[i].logit = -INFINITY;
    }
}

static void rs_reset(struct llama_sampler *smpl) {
    struct ruvllm_sampler_ctx *c = smpl->ctx;
    ruvllm_matcher_reset(c->matcher);
    c->accepted = 0;
}

static struct llama_sampler *rs_make(RuvllmGrammar *g, RuvllmMatcher *m, int64_t max_tokens, int64_t accepted);

static struct llama_sampler *rs_clone(const struct llama_sampler *smpl) {
    const struct ruvllm_sampler_ctx *c = smpl->ctx;
    RuvllmGrammar *g = ruvllm_grammar_clone(c->grammar);
    RuvllmMatcher *m = ruvllm_matcher_clone(c->matcher);
    if (g == NULL || m == NULL) {
        ruvllm_grammar_free(g);
        ruvllm_matcher_free(m);
        return NULL;
    }
    return rs_make(g, m, c->max_tokens, c->accepted);
}

static void rs_free(struct llama_sampler *smpl) {
    struct ruvllm_sampler_ctx *c = smpl->ctx;
    if (c == NULL) return;
    ruvllm_matcher_free(c->matcher);
    ruvllm_grammar_free(c->grammar);
    free(c->bits);
    free(c);
}

static struct llama_sampler_i ruvllm_sampler_iface = {
    .name = rs_name,
    .accept = rs_accept,
    .apply = rs_apply,
    .reset = rs_reset,
    .clone = rs_clone,
    .free = rs_free,
};

static struct llama_sampler *rs_make(RuvllmGrammar *g, RuvllmMatcher *m, int64_t max_tokens, int64_t accepted) {
    struct ruvllm_sampler_ctx *c = calloc(1, sizeof *c);
    const size_t n_vocab = ruvllm_matcher_n_vocab(m);
    uint32_t *bits = calloc((n_vocab + 31) / 32 + 1, sizeof *bits);
    if (c == NULL || bits == NULL) {
        free(c);
        free(bits);
        ruvllm_matcher_free(m);
        ruvllm_grammar_free(g);
        return NULL;
    }
    c->grammar = g;
    c->matcher = m;
    c->bits = bits;
    c->n_vocab = n_vocab;
    c->words = (n_vocab + 31) / 32;
    c->max_tokens = max_tokens;
    c->accepted = accepted;
    return llama_sampler_init(&ruvllm_sampler_iface, c);
}

struct llama_sampler *ruvllm_llama_sampler_init(const RuvllmGrammar *grammar, int64_t max_tokens) {
    if (grammar == NULL) return NULL;
    RuvllmGrammar *g = ruvllm_grammar_clone(grammar);
    RuvllmMatcher *m = ruvllm_matcher_new(g);
    if (g == NULL || m == NULL) {
        ruvllm_grammar_free(g);
        ruvllm_matcher_free(m);
        return NULL;
    }
    return rs_make(g, m, max_tokens, 0);
}

RuvllmMatcher *ruvllm_llama_sampler_matcher(const struct llama_sampler *smpl) {
    if (smpl == NULL || smpl->iface != &ruvllm_sampler_iface) return NULL;
    return ((const struct ruvllm_sampler_ctx *)smpl->ctx)->matcher;
}
