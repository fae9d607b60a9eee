/*
 * The troupe command's side of the admin endpoint: one request to a
 * running node's --admin address with nng's HTTP client, and the printing
 * of its JSON answer (cli.h, "Through a running node").
 *
 * Answers print as `path value` lines, one per leaf of the JSON document
 * (arrays by index: "queues.0.name jobs"), so that they read and grep
 * like the commands' other output; --json prints the document itself, one
 * line, for scripts. A JSON error answer prints its message and the
 * command fails (exit 1).
 */
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The longest a request may take (an index rebuild waits for the build). */
#define ANSWER_TIMEOUT_MS 60000

int
cli_admin_common_flag(cli_admin *a, const cli_cmd *c, int ch, char **argv,
                      troupe_log_level *level)
{
    switch (ch) {
    case OPT_ADMIN_URL:
        if (strncmp(optarg, "http://", 7) != 0 && strstr(optarg, "://") != NULL)
            return cli_usage(c,
                             "--admin wants http://HOST:PORT or HOST:PORT, "
                             "got '%s'",
                             optarg);
        snprintf(a->url, sizeof(a->url), "%s%s",
                 strncmp(optarg, "http://", 7) == 0 ? "" : "http://", optarg);
        a->on = true;
        return CLI_CONTINUE;
    case OPT_ADMIN_TOKEN_FILE:
        a->token_file = optarg;
        return CLI_CONTINUE;
    case OPT_JSON:
        a->json = true;
        return CLI_CONTINUE;
    default:
        return cli_common_flag(c, ch, argv, level);
    }
}

int
cli_admin_ready(cli_admin *a, const cli_cmd *c)
{
    if (!a->on && (a->token_file != NULL || a->json))
        return cli_usage(c, "--admin-token and --json go with --admin");
    if (a->token_file != NULL &&
        !cli_read_secret(c, "--admin-token", a->token_file, a->token,
                         sizeof(a->token) - 1, &a->token_len))
        return CLI_USAGE;
    return CLI_CONTINUE;
}

char *
cli_admin_escape(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(3 * n + 1);
    if (o == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || strchr("-._~", ch) != NULL) {
            o[k++] = (char)ch;
        } else {
            snprintf(o + k, 4, "%%%02X", ch);
            k += 3;
        }
    }
    o[k] = '\0';
    return o;
}

static void
print_leaf(const char *path, json_t *v)
{
    if (json_is_string(v)) {
        printf("%s %s\n", path, json_string_value(v));
    } else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%s %s\n", path, s ? s : "?");
        free(s);
    }
}

static void
print_lines(const char *path, json_t *v)
{
    char sub[1024];
    if (json_is_object(v) && json_object_size(v) > 0 &&
        !(json_object_size(v) == 1 && json_object_get(v, "hex") != NULL)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", k);
            print_lines(sub, x);
        }
    } else if (json_is_array(v) && json_array_size(v) > 0) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            snprintf(sub, sizeof(sub), "%s%s%zu", path, *path ? "." : "", i);
            print_lines(sub, x);
        }
    } else {
        print_leaf(*path ? path : "value", v);
    }
}

int
cli_admin_request(const cli_admin *a, const char *method, const char *path,
                  const char *body, json_t **out)
{
    *out = NULL;
    nng_url *url = NULL;
    nng_http_client *cl = NULL;
    nng_http_req *req = NULL;
    nng_http_res *res = NULL;
    nng_aio *aio = NULL;
    int rc = CLI_FAIL;
    int rv = nng_url_parse(&url, a->url);
    if (rv != 0) {
        fprintf(stderr, "troupe: --admin %s is not a URL: %s\n", a->url,
                nng_strerror(rv));
        return CLI_USAGE;
    }
    char auth[CLI_SECRET_MAX + 32];
    snprintf(auth, sizeof(auth), "Bearer %s", a->token);
    if ((rv = nng_http_client_alloc(&cl, url)) != 0 ||
        (rv = nng_http_req_alloc(&req, url)) != 0 ||
        (rv = nng_http_req_set_method(req, method)) != 0 ||
        (rv = nng_http_req_set_uri(req, path)) != 0 ||
        (a->token_len > 0 &&
         (rv = nng_http_req_set_header(req, "Authorization", auth)) != 0) ||
        (body != NULL &&
         ((rv = nng_http_req_set_header(req, "Content-Type",
                                        "application/json")) != 0 ||
          (rv = nng_http_req_copy_data(req, body, strlen(body))) != 0)) ||
        (rv = nng_http_res_alloc(&res)) != 0 ||
        (rv = nng_aio_alloc(&aio, NULL, NULL)) != 0) {
        fprintf(stderr, "troupe: admin request: %s\n", nng_strerror(rv));
        goto out;
    }
    nng_aio_set_timeout(aio, ANSWER_TIMEOUT_MS);
    nng_http_client_transact(cl, req, res, aio);
    nng_aio_wait(aio);
    if ((rv = nng_aio_result(aio)) != 0) {
        fprintf(stderr, "troupe: cannot reach the admin endpoint at %s: %s\n",
                a->url, nng_strerror(rv));
        goto out;
    }
    void *data = NULL;
    size_t len = 0;
    nng_http_res_get_data(res, &data, &len);
    json_error_t err;
    json_t *j = json_loadb(data, len, 0, &err);
    unsigned status = nng_http_res_get_status(res);
    json_t *e = json_object_get(j, "error");
    if (j == NULL) {
        fprintf(stderr,
                "troupe: the admin endpoint at %s answered %u, not "
                "JSON\n",
                a->url, status);
    } else if (status != 200 || e != NULL) {
        const char *m = json_string_value(json_object_get(e, "message"));
        fprintf(stderr, "troupe: %s %s: %u %s\n", method, path, status,
                m ? m : "(no message)");
        json_decref(j);
    } else {
        *out = j;
        rc = 0;
    }
out:
    nng_aio_free(aio);
    nng_http_res_free(res);
    nng_http_req_free(req);
    nng_http_client_free(cl);
    nng_url_free(url);
    return rc;
}

void
cli_admin_print(const cli_admin *a, json_t *j)
{
    if (a->json) {
        char *s = json_dumps(j, JSON_COMPACT);
        printf("%s\n", s ? s : "null");
        free(s);
    } else {
        print_lines("", j);
    }
}

int
cli_admin_run(const cli_admin *a, const char *method, const char *path,
              const char *body)
{
    json_t *j = NULL;
    int rc = cli_admin_request(a, method, path, body, &j);
    if (rc == 0)
        cli_admin_print(a, j);
    json_decref(j);
    return rc;
}
