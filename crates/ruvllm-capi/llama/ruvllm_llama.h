/* A llama.cpp sampler that enforces a ruvllm grammar: add it to a llama_sampler_chain
 * before the sampler that picks the token (greedy, dist); no patch to llama.cpp.
 *
 *   RuvllmVocabulary *v = ruvllm_llama_vocabulary(llama_model_get_vocab(model), err, sizeof err);
 *   RuvllmEngine *e = ruvllm_engine_new(v);
 *   RuvllmGrammar *g = ruvllm_grammar_compile(e, RUVLLM_KIND_JSON_SCHEMA, schema, NULL, err, sizeof err);
 *   llama_sampler_chain_add(chain, ruvllm_llama_sampler_init(g, max_tokens));
 *   llama_sampler_chain_add(chain, llama_sampler_init_greedy());
 *
 * Guide: docs/INTEGRATIONS.md. Example: examples/c/llama_generate.c. */
#ifndef RUVLLM_LLAMA_H
#define RUVLLM_LLAMA_H

#include <stdint.h>

#include "llama.h"
#include "ruvllm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A ruvllm vocabulary built from the model's own token pieces (llama_token_to_piece):
 * control tokens are never allowed as text, every end-of-generation token (llama_vocab_is_eog)
 * ends a generation, and the logits width is llama_vocab_n_tokens. NULL on failure, with the
 * reason in err. Cost: one pass over the vocabulary (tens of milliseconds for 50k tokens). */
RuvllmVocabulary *ruvllm_llama_vocabulary(const struct llama_vocab *vocab, char *err, size_t err_len);

/* A sampler enforcing `grammar` (the sampler keeps its own reference: the caller may free
 * its). `max_tokens` >= 0: the budget-aware mask, so that the output is complete within
 * that many accepted tokens, EOS included; < 0: no budget. apply() sets the logit of every entry whose
 * token id the grammar forbids to -INFINITY (by id, never by position, so it works after
 * any sampler that sorts or trims the candidates); accept() commits the token; reset()
 * starts over; clone() copies the state. NULL when grammar is NULL. */
struct llama_sampler *ruvllm_llama_sampler_init(const RuvllmGrammar *grammar, int64_t max_tokens);

/* The sampler's matcher (to ask ruvllm_matcher_is_accepting, ruvllm_matcher_get_error or
 * for forced tokens), or NULL when smpl is not a ruvllm sampler. Owned by the sampler. */
RuvllmMatcher *ruvllm_llama_sampler_matcher(const struct llama_sampler *smpl);

#ifdef __cplusplus
}
#endif

#endif /* RUVLLM_LLAMA_H */
