/* LSE C API: score text with a Qwen3.5-family model in process.
 *
 * Every function returns 0 on success. On failure it returns a non-zero code and, when `err`
 * is not NULL, stores a newly allocated UTF-8 message there; free it with lse_string_free.
 * Strings returned through `json_out` are freed the same way.
 *
 * An engine may be shared by threads: concurrent lse_perplexity calls on one engine queue
 * in arrival order (FIFO) and run one at a time, as requests do when serving.
 */
#ifndef LSE_LSE_H
#define LSE_LSE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lse_engine lse_engine;

/* Error codes. */
#define LSE_OK 0
#define LSE_ERR_INVALID_ARGUMENT 1 /* NULL pointer, bad JSON, unknown or ill-typed field */
#define LSE_ERR_FAILED 2           /* the model could not be loaded, or the run failed */
#define LSE_ERR_PANIC 3            /* an internal error; the engine should be closed */

/* Opens an engine. `config_json` is an object with the serving options:
 *   "model" (string, required): Hugging Face model directory;
 *   "pool": "host" (default), "cpu", "hip:N" / "hrx:N", "cuda:N";
 *   "batch_size", "ubatch_size", "kv_len" (integers), "kv_cache_dtype": "bf16" | "f16" | "f32";
 *   "gemm_activations": "reference" (default) | "weight-dtype" | "bf16x3", as the CLI's
 *     --gemm-activations;
 *   "flash_prefill_v2": "on" | "off" | "auto"; "prefill_attention_scale" (number, alpha);
 *   "flashprefill_block_size", "flashprefill_sink_blocks", "flashprefill_window_blocks",
 *   "flashprefill_last_full_blocks", "flashprefill_min_budget", "flashprefill_min_kv_len"
 *   (integers, as the CLI options of the same names); "no_cpu_fallback": boolean
 *   (LSE_REQUIRE_DEVICE_KERNELS=1 in the environment sets it; a value other than 1 or 0 is an
 *   error). A "ubatch_size" above "batch_size" is clamped to it, as llama.cpp does.
 * On success stores the engine in *out. */
int lse_engine_open(const char *config_json, lse_engine **out, char **err);

/* Scores one request and stores the report (the `lse perplexity` JSON) in *json_out.
 * `request_json` fields: "text" or "tokens" (array of ids), "method" ("chunks" | "sliding"),
 * "ctx", "stride", "chunks", "kld_base_out" (path, a regular file), "kld_top_k" (1 to 32,
 * default 32; with "kld_base" it must equal the base's or be left out), "kld_base" (path),
 * "include_windows" (default true), "include_token_ids" (default false),
 * "include_token_stats" (default false: the per-token `token_stats` object). */
int lse_perplexity(lse_engine *engine, const char *request_json, char **json_out, char **err);

/* Frees a string returned by this API. NULL is ignored. */
void lse_string_free(char *s);

/* Closes an engine. NULL is ignored. No call on it may be in flight. */
void lse_engine_close(lse_engine *engine);

#ifdef __cplusplus
}
#endif

#endif /* LSE_LSE_H */
