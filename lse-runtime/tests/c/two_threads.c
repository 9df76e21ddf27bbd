/* Drives the C API the way an embedding application would: one engine, two threads scoring
 * at once, then the error path. Usage: two_threads <engine-config-json> <request-json>. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lse/lse.h"

struct job {
    lse_engine *engine;
    const char *request;
    int rc;
    char *json;
    char *err;
};

static void *score(void *arg) {
    struct job *j = arg;
    j->rc = lse_perplexity(j->engine, j->request, &j->json, &j->err);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CONFIG_JSON REQUEST_JSON\n", argv[0]);
        return 2;
    }
    lse_engine *engine = NULL;
    char *err = NULL;
    if (lse_engine_open(argv[1], &engine, &err) != LSE_OK) {
        fprintf(stderr, "open failed: %s\n", err ? err : "(no message)");
        lse_string_free(err);
        return 1;
    }

    struct job jobs[2] = {{engine, argv[2], -1, NULL, NULL}, {engine, argv[2], -1, NULL, NULL}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, score, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (jobs[i].rc != LSE_OK) {
            fprintf(stderr, "thread %d failed (%d): %s\n", i, jobs[i].rc, jobs[i].err ? jobs[i].err : "");
            return 1;
        }
        printf("%s\n----\n", jobs[i].json);
        lse_string_free(jobs[i].json);
    }

    /* A request with an unknown field fails with a message naming it. */
    char *json = NULL;
    int rc = lse_perplexity(engine, "{\"tokens\": [1, 2], \"bogus\": 1}", &json, &err);
    printf("error %d: %s\n", rc, err ? err : "(none)");
    lse_string_free(err);
    if (rc != LSE_ERR_INVALID_ARGUMENT || json != NULL) return 1;

    lse_engine_close(engine);
    return 0;
}
