package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// With FERRY_METRICS_KEY set, /metrics answers only that key as a Bearer
// token: no key, a wrong key and the admin key are 401 problems; the
// other operational routes stay open. Without it /metrics is open (every
// other metrics test scrapes with no key).
func TestMetricsKey(t *testing.T) {
	t.Parallel()
	const key = "metrics-scraper-key-0123"
	env := ferrytest.Start(t, func(c *server.Config) { c.MetricsKey = key })

	for _, tc := range []struct {
		name, authorization string
	}{
		{"no key", ""},
		{"not bearer", "Basic " + key},
		{"empty bearer", "Bearer "},
		{"wrong key", "Bearer " + key + "x"},
		{"prefix of the key", "Bearer " + key[:len(key)-1]},
		{"admin key", "Bearer " + ferrytest.AdminKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := forTest(env, t)
			header := http.Header{}
			if tc.authorization != "" {
				header.Set("Authorization", tc.authorization)
			}
			r := e.DoWith("GET", "/metrics", nil, header)
			requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
			require.Contains(t, r.Header.Get("WWW-Authenticate"), "Bearer")
			require.NotContains(t, string(r.Body), "ferry_", "no metrics in the refusal")
		})
	}

	r := env.DoWith("GET", "/metrics", nil, http.Header{"Authorization": {"Bearer " + key}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "ferry_http_request_duration_seconds")
	r = env.DoWith("GET", "/metrics", nil, http.Header{"Authorization": {"bearer " + key}})
	require.Equal(t, http.StatusOK, r.Status, "the scheme is case-insensitive, as for API keys")
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
		require.Equal(t, http.StatusOK, env.DoWith("GET", path, nil, http.Header{}).Status, path)
	}
}
