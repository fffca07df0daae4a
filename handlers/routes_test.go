package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "q", nil)
	before := snapshot(t, env)
	auth := http.Header{"Authorization": {"Bearer " + ferrytest.AdminKey}, "Content-Type": {"application/json"}}
	cases := []struct {
		method, path string
		allow        []string
	}{
		{"POST", "/v1/queues", []string{"GET"}},
		{"DELETE", "/v1/queues", []string{"GET"}},
		{"PATCH", "/v1/queues/q", []string{"GET", "PUT", "DELETE"}},
		{"POST", "/v1/queues/q", []string{"GET", "PUT", "DELETE"}},
		{"PUT", "/v1/queues/q/messages", []string{"GET", "POST", "DELETE"}},
		{"GET", "/v1/queues/q/receive", []string{"POST"}},
		{"DELETE", "/v1/queues/q/ack", []string{"POST"}},
		{"GET", "/v1/queues/q/nack", []string{"POST"}},
		{"PUT", "/v1/queues/q/extend", []string{"POST"}},
		{"POST", "/v1/queues/q/dead-letters", []string{"GET", "DELETE"}},
		{"GET", "/v1/queues/q/dead-letters/redrive", []string{"POST"}},
		{"POST", "/healthz", []string{"GET"}},
		{"DELETE", "/metrics", []string{"GET"}},
		{"PUT", "/openapi.yaml", []string{"GET"}},
	}
	v := openapitest.New(t)
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			var body []byte
			if tc.method != "GET" && tc.method != "DELETE" {
				body = []byte(`{}`)
			}
			r := rawDo(t, env, tc.method, tc.path, body, auth)
			v.CheckProblem(t, r.Status, r.Header, r.Body)
			requireProblem(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
			allow := r.Header.Get("Allow")
			require.NotEmpty(t, allow, "a 405 must list the allowed methods (RFC 9110 §15.5.6)")
			for _, m := range tc.allow {
				require.Contains(t, allow, m)
			}
		})
	}
	require.Equal(t, before, snapshot(t, env))
}

func TestUnknownRoute(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	auth := http.Header{"Authorization": {"Bearer " + ferrytest.AdminKey}}
	v := openapitest.New(t)
	for _, path := range []string{"/v1/topics-nope", "/v1/queues/q/nope", "/v2/queues", "/nope"} {
		r := rawDo(t, env, "GET", path, nil, auth)
		v.CheckProblem(t, r.Status, r.Header, r.Body)
		requireProblem(t, r, http.StatusNotFound, "not_found")
	}
}
