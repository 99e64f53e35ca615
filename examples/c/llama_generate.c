/* Generates with llama.cpp under a ruvllm grammar: a JSON Schema, a GBNF grammar, a regex
 * or a choice list, enforced by the ruvllm sampler in llama.cpp's own sampler chain.
 *
 *   llama_generate MODEL.gguf schema|gbnf|regex|choices SPEC_FILE "PROMPT" [MAX_TOKENS]
 *
 * Prints the answer on stdout and `finish_reason=stop|length tokens=N` on stderr; exits 0
 * when the answer ended with EOS (complete), 2 when it hit MAX_TOKENS, 1 on an error.
 * Build (scripts/build-c-example.sh does this): compile with this file's directory's
 * ../../crates/ruvllm-capi/{include,llama} and llama.cpp's include/ on the include path,
 * add crates/ruvllm-capi/llama/ruvllm_llama.c, link -lruvllm -lllama. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "ruvllm.h"
#include "ruvllm_llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void)data;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static bool no_progress(float progress, void *data) {
    (void)progress;
    (void)data;
    return true;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s != NULL && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s != NULL) s[n] = 0;
    fclose(f);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL.gguf schema|gbnf|regex|choices SPEC_FILE PROMPT [MAX_TOKENS]\n", argv[0]);
        return 1;
    }
    const char *kinds[] = {"schema", "gbnf", "regex", "choices"};
    const uint32_t kind_ids[] = {RUVLLM_KIND_JSON_SCHEMA, RUVLLM_KIND_GBNF, RUVLLM_KIND_REGEX, RUVLLM_KIND_CHOICES};
    int kind = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(argv[2], kinds[i]) == 0) kind = i;
    if (kind < 0) {
        fprintf(stderr, "unknown kind %s\n", argv[2]);
        return 1;
    }
    char *spec = read_file(argv[3]);
    if (spec == NULL) {
        fprintf(stderr, "cannot read %s\n", argv[3]);
        return 1;
    }
    const int max_tokens = argc > 5 ? atoi(argv[5]) : 128;

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = no_progress;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (model == NULL) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);

    /* The grammar, compiled against the model's own token pieces. */
    char err[512];
    RuvllmVocabulary *rv = ruvllm_llama_vocabulary(vocab, err, sizeof err);
    if (rv == NULL) {
        fprintf(stderr, "vocabulary: %s\n", err);
        return 1;
    }
    RuvllmEngine *engine = ruvllm_engine_new(rv);
    RuvllmGrammar *grammar = ruvllm_grammar_compile(engine, kind_ids[kind], spec, NULL, err, sizeof err);
    if (grammar == NULL) {
        fprintf(stderr, "grammar: %s\n", err);
        return 1;
    }

    /* The prompt, in the model's chat template. */
    struct llama_chat_message msg = {"user", argv[4]};
    const char *tmpl = llama_model_chat_template(model, NULL);
    int plen = llama_chat_apply_template(tmpl, &msg, 1, true, NULL, 0);
    char *prompt = plen > 0 ? malloc((size_t)plen + 1) : NULL;
    if (prompt == NULL || llama_chat_apply_template(tmpl, &msg, 1, true, prompt, plen + 1) != plen) {
        fprintf(stderr, "the model's chat template cannot be applied\n");
        return 1;
    }
    prompt[plen] = 0;
    int n_prompt = -llama_tokenize(vocab, prompt, plen, NULL, 0, true, true);
    llama_token *ids = malloc(sizeof(llama_token) * (size_t)n_prompt);
    if (ids == NULL || llama_tokenize(vocab, prompt, plen, ids, n_prompt, true, true) != n_prompt) {
        fprintf(stderr, "cannot tokenize the prompt\n");
        return 1;
    }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + max_tokens + 8);
    cp.n_batch = (uint32_t)n_prompt;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        fprintf(stderr, "cannot create the context\n");
        return 1;
    }

    /* The chain: ruvllm's mask (with the budget), then the greedy pick. */
    struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, ruvllm_llama_sampler_init(grammar, max_tokens));
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    RuvllmMatcher *matcher = ruvllm_llama_sampler_matcher(llama_sampler_chain_get(chain, 0));

    struct llama_batch batch = llama_batch_get_one(ids, n_prompt);
    const char *finish = "length";
    int n_out = 0;
    llama_token tok;
    while (n_out < max_tokens) {
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "llama_decode failed\n");
            return 1;
        }
        tok = llama_sampler_sample(chain, ctx, -1); /* applies the chain and accepts */
        n_out++;
        if (llama_vocab_is_eog(vocab, tok)) {
            finish = "stop";
            break;
        }
        char piece[256];
        int n = llama_token_to_piece(vocab, tok, piece, sizeof piece, 0, false);
        if (n > 0) fwrite(piece, 1, (size_t)n, stdout);
        batch = llama_batch_get_one(&tok, 1);
    }
    fflush(stdout);
    const char *merr = ruvllm_matcher_get_error(matcher);
    fprintf(stderr, "\nfinish_reason=%s tokens=%d matcher_error=%s\n", finish, n_out, merr ? merr : "none");

    llama_sampler_free(chain);
    llama_free(ctx);
    ruvllm_grammar_free(grammar);
    ruvllm_engine_free(engine);
    ruvllm_vocabulary_free(rv);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    free(prompt);
    free(spec);
    return strcmp(finish, "stop") == 0 && merr == NULL ? 0 : 2;
}
