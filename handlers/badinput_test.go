package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// snapshot is everything a bad request could change: every queue's
// configuration and counts (the age, which moves by itself, left out).
func snapshot(t testing.TB, env *ferrytest.Env) []client.Queue {
	t.Helper()
	list := call[struct {
		Queues []client.Queue `json:"queues"`
	}](t, env, "GET", "/v1/queues", nil, nil, http.StatusOK)
	for i := range list.Queues {
		list.Queues[i].Stats.OldestAgeSeconds = 0
	}
	return list.Queues
}

type badCase struct {
	name   string
	method string
	path   string
	body   any // string: sent as is; else marshalled
	header http.Header
	status int
	code   string
}

// runBadCases sends each case and checks the problem and that nothing was
// written (the snapshot is unchanged).
func runBadCases(t *testing.T, env *ferrytest.Env, cases []badCase) {
	t.Helper()
	runBadCasesOn(t, env, cases, func(t testing.TB, env *ferrytest.Env) any { return snapshot(t, env) }, func(header http.Header) http.Header {
		if header == nil {
			header = http.Header{}
		}
		if header.Get("Authorization") == "" {
			header.Set("Authorization", "Bearer "+ferrytest.AdminKey)
		}
		return header
	})
}

// runBadCasesOn is runBadCases with what a refused request must leave
// unchanged read by snap, and each case's headers made by headers.
func runBadCasesOn(t *testing.T, env *ferrytest.Env, cases []badCase, snap func(testing.TB, *ferrytest.Env) any, headers func(http.Header) http.Header) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := forTest(env, t)
			before := snap(t, env)
			r := env.DoWith(tc.method, tc.path, tc.body, headers(tc.header))
			requireProblem(t, r, tc.status, tc.code)
			require.Equal(t, before, snap(t, env), "a refused request must write nothing")
		})
	}
}

// setupBad makes queue "bad" hold one available message, one in flight, one
// delayed and one dead letter, and returns a current receipt.
func setupBad(t *testing.T, env *ferrytest.Env) string {
	putQueue(t, env, "bad", nil)
	send(t, env, "bad", msg("dead"), msg("flying"), msg("waiting"))
	send(t, env, "bad", msg("later", "delay_seconds", 600))
	dead := receive(t, env, "bad", nil)
	settle(t, env, "bad", "nack", map[string]any{"receipts": receipts(dead), "dead_letter": true})
	fly := receive(t, env, "bad", map[string]any{"visibility_timeout_seconds": 3600})
	require.Len(t, fly, 1)
	require.Equal(t, client.QueueStats{Available: 1, InFlight: 1, Delayed: 1, DeadLetters: 1}, counts(t, env, "bad"))
	return fly[0].Receipt
}

// nameRoute is a request on a named queue or topic: the path after its
// name, and the body.
type nameRoute struct {
	what, method, rest string
	body               any
}

// badNameCases is, for every name no queue or topic may have (mark a
// character of its kind's own), a 400 from PUT, GET and DELETE of the name
// and from each of the kind's own routes.
func badNameCases(path func(string, ...string) string, mark string, own ...nameRoute) []badCase {
	routes := append([]nameRoute{{"put", "PUT", "", `{}`}, {"get", "GET", "", nil}, {"delete", "DELETE", "", nil}}, own...)
	names := []string{"a b", " a", ".hidden", "-dash", "_under", strings.Repeat("x", 129), "ünïcode", mark, "a%b", "a:b", "a@b", "a+b", "a*"}
	var cases []badCase
	for _, n := range names {
		for _, r := range routes {
			cases = append(cases, badCase{fmt.Sprintf("%s %q", r.what, n), r.method, path(n, r.rest), r.body, nil, http.StatusBadRequest, "invalid_request"})
		}
	}
	return cases
}

func TestAuth(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "secured", nil)
	headers := map[string]http.Header{
		"missing":         {},
		"wrong key":       {"Authorization": {"Bearer wrong-key-0123456789abcdef"}},
		"empty bearer":    {"Authorization": {"Bearer "}},
		"bearer only":     {"Authorization": {"Bearer"}},
		"basic scheme":    {"Authorization": {"Basic dGVzdC1hZG1pbi1rZXk6MDEyMzQ1Njc4OQ=="}},
		"basic with key":  {"Authorization": {"Basic " + ferrytest.AdminKey}},
		"token scheme":    {"Authorization": {"Token " + ferrytest.AdminKey}},
		"no scheme":       {"Authorization": {ferrytest.AdminKey}},
		"key prefix":      {"Authorization": {"Bearer " + ferrytest.AdminKey[:len(ferrytest.AdminKey)-1]}},
		"key with suffix": {"Authorization": {"Bearer " + ferrytest.AdminKey + "x"}},
	}
	routes := []struct{ method, path string }{
		{"GET", "/v1/queues"},
		{"PUT", "/v1/queues/intruder"},
		{"GET", "/v1/queues/secured"},
		{"DELETE", "/v1/queues/secured"},
		{"POST", "/v1/queues/secured/messages"},
		{"POST", "/v1/queues/secured/receive"},
		{"DELETE", "/v1/queues/secured/messages"},
		{"GET", "/v1/queues/secured/dead-letters"},
		{"GET", "/v1/queues/ghost"},
	}
	before := snapshot(t, env)
	for hname, h := range headers {
		for _, rt := range routes {
			t.Run(hname+" "+rt.method+" "+rt.path, func(t *testing.T) {
				env := forTest(env, t)
				var body any
				if rt.method == "POST" || rt.method == "PUT" {
					body = `{"messages":[{"body":1}]}`
					if strings.HasSuffix(rt.path, "receive") || rt.method == "PUT" {
						body = `{}`
					}
				}
				hh := h.Clone()
				r := env.DoWith(rt.method, rt.path, body, hh)
				requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
				require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer"),
					"WWW-Authenticate: %q", r.Header.Get("WWW-Authenticate"))
			})
		}
	}
	require.Equal(t, before, snapshot(t, env), "unauthorized requests write nothing")

	// The scheme is case-insensitive (RFC 9110); the key is what matters.
	r := env.DoWith("GET", "/v1/queues", nil, http.Header{"Authorization": {"bearer " + ferrytest.AdminKey}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}
