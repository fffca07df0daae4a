package handlers_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// TestEdge lists the findings of issue 8 § 2, "The HTTP edge under attack",
// one case each: every case reproduces its attack against a real server and
// fails on the code before the fix.
func TestEdge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"slow bodies are cut; unauthenticated ones are answered 401 without reading", edgeSlowBodies},
		{"no client input becomes a metrics label", edgeMetricLabels},
		{"numbers PostgreSQL cannot store are 400 in bodies, data and filters", edgeNumbers},
		{"attributes count toward the 256 KiB limit", edgeAttributeLimit},
		{"visibility_timeout_seconds is 0 only where SQS has it: a queue, a receive", edgeVisibilityZero},
		{"receipts and cursors are strict", edgeStrictReceipts},
		{"member names match exactly; a duplicate member is 400", edgeMemberNames},
		{`\u0000 and lone surrogates are refused in bodies, data and attributes alike`, edgeNUL},
		{"an invalid traceparent attribute is 400", edgeTraceparent},
		{"unknown query parameters are 400 on every route", edgeQueryParams},
		{"HEAD /healthz and /readyz are 200; a bad %-escape is a problem", edgeHeadAndEscapes},
		{"concurrent scrapes share one database refresh", edgeMetricsCache},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

// rawExchange sends req on a new TCP connection to env's server and reads
// until the server closes the connection or wait has passed. closed tells
// which; took is when the read ended.
func rawExchange(t *testing.T, env *ferrytest.Env, req string, wait time.Duration) (resp string, closed bool, took time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, req)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(start.Add(wait)))
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err == io.EOF {
			return b.String(), true, time.Since(start)
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return b.String(), false, time.Since(start)
		}
		if err != nil {
			// A reset after the answer also ends the exchange.
			return b.String(), true, time.Since(start)
		}
	}
}

// parseRaw parses a raw HTTP/1.1 response.
func parseRaw(t *testing.T, raw string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	require.NoError(t, err, "response: %q", raw)
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func slowHead(method, path string, auth bool) string {
	h := method + " " + path + " HTTP/1.1\r\nHost: ferry\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n"
	if auth {
		h += "Authorization: Bearer " + ferrytest.AdminKey + "\r\n"
	}
	return h + "\r\n{"
}

func edgeSlowBodies(t *testing.T) {
	// Without a key: 401 before the body is read, and the connection is
	// closed at once (the body timeout here is far longer than the wait).
	patient := ferrytest.Start(t, func(c *server.Config) { c.BodyReadTimeout = time.Minute })
	// Likewise any answer given without reading the body (no route, no
	// such method), which needs no key either.
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"POST", "/v1/queues/q/messages", http.StatusUnauthorized},
		{"PUT", "/v1/queues/q", http.StatusUnauthorized},
		{"POST", "/v1/topics/t/events", http.StatusUnauthorized},
		{"POST", "/nope", http.StatusNotFound},
		{"POST", "/healthz", http.StatusMethodNotAllowed},
	} {
		raw, closed, took := rawExchange(t, patient, slowHead(tc.method, tc.path, false), 10*time.Second)
		resp, _ := parseRaw(t, raw)
		require.Equal(t, tc.status, resp.StatusCode, tc.path)
		require.True(t, resp.Close, "%s: answered with Connection: close", tc.path)
		require.True(t, closed, "%s: the server must close the connection of an unread slow body (waited %v)", tc.path, took)
		require.Less(t, took, 5*time.Second, tc.path)
	}

	// With a key: the body must arrive within the configured timeout.
	const timeout = time.Second
	env := ferrytest.Start(t, func(c *server.Config) { c.BodyReadTimeout = timeout })
	putQueue(t, env, "slow", nil)
	putTopic(t, env, "slow", map[string]any{"partitions": 1}, http.StatusCreated)
	for _, path := range []string{"/v1/queues/slow/messages", "/v1/queues/slow/receive", "/v1/topics/slow/events"} {
		raw, closed, took := rawExchange(t, env, slowHead("POST", path, true), 15*time.Second)
		require.True(t, closed, "%s: a stalled body must be cut (waited %v, got %q)", path, took, raw)
		require.Less(t, took, timeout+4*time.Second, path)
		resp, body := parseRaw(t, raw)
		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "%s: %s", path, body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	}
	require.Equal(t, client.QueueStats{}, counts(t, env, "slow"), "nothing was sent")

	// Long polls write, they do not read: a wait longer than the body
	// timeout still answers 200, with a body (POST) and without (GET).
	var wg sync.WaitGroup
	results := make([]asyncResult, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		results[0] = doAsync(env, "POST", qpath("slow", "/receive"), map[string]any{"wait_seconds": 3})
	}()
	go func() { defer wg.Done(); results[1] = getAsync(env, tpath("slow", "/events?wait_seconds=3")) }()
	wg.Wait()
	for i, r := range results {
		require.NoError(t, r.err, i)
		require.Equal(t, http.StatusOK, r.status, "long poll %d: %s", i, r.body)
		require.GreaterOrEqual(t, r.took, 3*time.Second-100*time.Millisecond, "long poll %d waited its wait_seconds", i)
	}
}

func edgeMetricLabels(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "q", nil)
	auth := http.Header{"Authorization": {"Bearer " + ferrytest.AdminKey}}
	for i := range 20 {
		rawDo(t, env, fmt.Sprintf("BREW%d", i), "/v1/queues", nil, auth)
		rawDo(t, env, fmt.Sprintf("BREW%d", i), "/made-up-"+strconv.Itoa(i), nil, auth)
		rawDo(t, env, "GET", "/made-up-"+strconv.Itoa(i), nil, auth)
		rawDo(t, env, "GET", "/v1/queues/q/made-up-"+strconv.Itoa(i), nil, auth)
	}
	m, text := metrics(t, env)
	require.False(t, strings.Contains(text, "BREW"), "a made-up method became a label value")
	require.False(t, strings.Contains(text, "made-up"), "a made-up path became a label value")
	var other, unmatched float64
	for series, v := range m {
		if strings.HasPrefix(series, "ferry_http_request_duration_seconds_count{") {
			if strings.Contains(series, `method="other"`) {
				other += v
			}
			if strings.Contains(series, `route="unmatched"`) {
				unmatched += v
			}
		}
	}
	require.Equal(t, 40.0, other, "made-up methods are counted as other")
	require.GreaterOrEqual(t, unmatched, 60.0, "unknown routes are counted as unmatched")
}

func edgeNumbers(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "n", nil)
	putTopic(t, env, "n", map[string]any{"partitions": 1}, http.StatusCreated)
	// PostgreSQL's numeric: a display scale (digits after the point, less
	// the exponent) of at most 16383, at most 131072 digits before the
	// point, and an exponent below 2^30 - 1 in magnitude, whatever the value.
	refused := []string{"0e-16384", "-0e-16384", "1e-16384", "1.5e-16383", "0.1e-16383", "0.0e-16383", "100e-16385",
		"1e131072", "10e131071", "0e1073741823", "0e-1073741823", "1e99999999999"}
	stored := []string{"0e-16383", "1e-16383", "1.5e-16382", "1.00000e-16378", "9.99e131071", "0.01e131073", "0e131072",
		"0e1073741822", "1e400", "-1.5E-3", "0e00000000000000000000000005"}
	for _, n := range refused {
		requireProblem(t, env.Do("POST", tpath("n", "/events"), `{"events":[{"type":"t","data":`+n+`}]}`),
			http.StatusBadRequest, "invalid_request")
		requireProblem(t, env.Do("POST", tpath("n", "/events"), `{"events":[{"type":"t","data":{"a":[1,`+n+`]}}]}`),
			http.StatusBadRequest, "invalid_request")
		requireProblem(t, env.Do("POST", qpath("n", "/messages"), `{"messages":[{"body":`+n+`}]}`),
			http.StatusBadRequest, "invalid_request")
		requireProblem(t, env.Do("PUT", spath("n", "f"), `{"filter":{"data":{"a":[`+n+`]}}}`),
			http.StatusBadRequest, "invalid_request")
	}
	for _, n := range stored {
		r := env.Do("POST", tpath("n", "/events"), `{"events":[{"type":"t","data":`+n+`}]}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s: %s", n, r.Body)
		r = env.Do("POST", qpath("n", "/messages"), `{"messages":[{"body":`+n+`}]}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s: %s", n, r.Body)
	}
	// (Reading them back would defeat the spec validator, which parses
	// numbers as floats: 9.99e131071 comes back as 131072 digits.)
	require.EqualValues(t, len(stored)-1, getTopic(t, env, "n").Offsets[0].HeadOffset)
	requireProblem(t, env.Do("GET", spath("n", "f"), nil), http.StatusNotFound, "not_found")

	// A number counts as long as PostgreSQL writes it out: 1e131071 is
	// 131072 digits, and two of them are over the 256 KiB limit.
	for _, path := range []string{tpath("n", "/events"), qpath("n", "/messages")} {
		big := `[1e131071,1e131071]`
		body := `{"events":[{"type":"t","data":` + big + `}]}`
		if strings.Contains(path, "/messages") {
			body = `{"messages":[{"body":` + big + `}]}`
		}
		requireProblem(t, env.Do("POST", path, body), http.StatusRequestEntityTooLarge, "payload_too_large")
	}
}

func edgeAttributeLimit(t *testing.T) {
	env := ferrytest.Start(t)
	const limit = 256 << 10
	putQueue(t, env, "a", nil)
	putTopic(t, env, "a", map[string]any{"partitions": 1}, http.StatusCreated)
	attrs := map[string]string{}
	for i := range 70 {
		attrs[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 4000)
	}
	enc, err := json.Marshal(attrs)
	require.NoError(t, err)
	require.Greater(t, len(enc), limit)
	requireProblem(t, env.Do("POST", qpath("a", "/messages"), map[string]any{"messages": []any{msg(1, "attributes", attrs)}}),
		http.StatusRequestEntityTooLarge, "payload_too_large")
	requireProblem(t, env.Do("POST", tpath("a", "/events"), map[string]any{"events": []any{evt("t", "attributes", attrs)}}),
		http.StatusRequestEntityTooLarge, "payload_too_large")

	// Body (data) and attributes together: exactly the limit is allowed.
	small := map[string]string{}
	for i := range 10 {
		small[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 4000)
	}
	enc, err = json.Marshal(small)
	require.NoError(t, err)
	exact := stringBody(limit - len(enc))
	over := stringBody(limit - len(enc) + 1)
	send(t, env, "a", msg(exact, "attributes", small))
	publishEvents(t, env, "a", evt("t", "data", exact, "attributes", small))
	requireProblem(t, env.Do("POST", qpath("a", "/messages"), map[string]any{"messages": []any{msg(over, "attributes", small)}}),
		http.StatusRequestEntityTooLarge, "payload_too_large")
	requireProblem(t, env.Do("POST", tpath("a", "/events"), map[string]any{"events": []any{evt("t", "data", over, "attributes", small)}}),
		http.StatusRequestEntityTooLarge, "payload_too_large")
	require.Equal(t, client.QueueStats{Available: 1}, counts(t, env, "a"))
}

func edgeVisibilityZero(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "v", nil)
	putTopic(t, env, "v", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "v", "s", nil, http.StatusCreated)
	send(t, env, "v", msg(1))
	got := receive(t, env, "v", map[string]any{"visibility_timeout_seconds": 3600})
	require.Len(t, got, 1)
	zero := map[string]any{"visibility_timeout_seconds": 0}
	// A subscription's deliveries need a lease, and extend's 0 is a nack;
	// a queue's 0 and a receive's 0 are SQS's VisibilityTimeout 0
	// (handlers/sqs TestVisibilityTimeoutZero).
	runBadCases(t, env, []badCase{
		{"subscription put", "PUT", spath("v", "s"), zero, nil, http.StatusBadRequest, "invalid_request"},
		{"subscription create", "PUT", spath("v", "s0"), zero, nil, http.StatusBadRequest, "invalid_request"},
		{"receive -1", "POST", qpath("v", "/receive"), map[string]any{"visibility_timeout_seconds": -1}, nil, http.StatusBadRequest, "invalid_request"},
		{"extend", "POST", qpath("v", "/extend"), map[string]any{"receipts": receipts(got), "visibility_timeout_seconds": 0},
			nil, http.StatusBadRequest, "invalid_request"},
	})
	require.Equal(t, 30, getSub(t, env, "v", "s").VisibilityTimeoutSeconds)
	requireProblem(t, env.Do("GET", spath("v", "s0"), nil), http.StatusNotFound, "not_found")
	require.Empty(t, receive(t, env, "v", zero), "the message is in flight")
	require.Equal(t, []string{"ok"}, ack(t, env, "v", receipts(got)...), "the receipt is still current")
	require.Equal(t, http.StatusOK, env.Do("PUT", qpath("v"), zero).Status)
	require.Equal(t, http.StatusCreated, env.Do("PUT", qpath("v0"), zero).Status)
}

// tamper changes the last character of a base64url receipt to its
// neighbour, which differs only in bits a lax decoder ignores.
func tamper(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, s[len(s)-1])
	return s[:len(s)-1] + string(alphabet[i^1])
}

func edgeStrictReceipts(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "r", nil)
	send(t, env, "r", msg(1), msg(2), msg(3))
	got := receive(t, env, "r", map[string]any{"max_messages": 3, "visibility_timeout_seconds": 3600})
	require.Len(t, got, 3)
	rc := got[0].Receipt
	lax, err := base64.RawURLEncoding.DecodeString(tamper(rc))
	require.NoError(t, err, "a lax decoder takes the tampered receipt")
	exact, _ := base64.RawURLEncoding.DecodeString(rc)
	require.Equal(t, exact, lax, "and reads the same bytes")
	for _, forged := range []string{tamper(rc), rc[:5] + "\n" + rc[5:], rc + "\r"} {
		for _, action := range []string{"ack", "nack", "extend"} {
			body := map[string]any{"receipts": []string{forged}}
			if action == "extend" {
				body["visibility_timeout_seconds"] = 60
			}
			requireProblem(t, env.Do("POST", qpath("r", "/"+action), body), http.StatusBadRequest, "invalid_request")
		}
	}
	require.Equal(t, client.QueueStats{InFlight: 3}, counts(t, env, "r"))
	require.Equal(t, []string{"ok"}, ack(t, env, "r", rc))

	// Dead-letter cursors and ids: only the form Ferry issues.
	settle(t, env, "r", "nack", map[string]any{"receipts": receipts(got[1:]), "dead_letter": true})
	page := deadLetters(t, env, "r", "?limit=1")
	require.NotNil(t, page.Next)
	for _, cursor := range []string{"+" + *page.Next, "0" + *page.Next, " " + *page.Next} {
		requireProblem(t, env.Do("GET", qpath("r", "/dead-letters?limit=1&after=")+urlQuery(cursor), nil),
			http.StatusBadRequest, "invalid_request")
	}
	r := env.Do("POST", qpath("r", "/dead-letters/redrive"), map[string]any{"ids": []string{"+" + got[1].ID, "0" + got[2].ID}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.JSONEq(t, `{"redriven": 0}`, string(r.Body), "ids Ferry never issued name no dead letter")

	// Offsets and partitions of the event log, likewise.
	putTopic(t, env, "r", map[string]any{"partitions": 1}, http.StatusCreated)
	for _, q := range []string{"?from_offset=%2B0", "?from_offset=00", "?partition=00", "?partition=%2B0", "?limit=%2B5", "?limit=05"} {
		requireProblem(t, env.Do("GET", tpath("r", "/events")+q, nil), http.StatusBadRequest, "invalid_request")
	}
}

func urlQuery(s string) string { return strings.NewReplacer("+", "%2B", " ", "%20").Replace(s) }

func edgeMemberNames(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "m", nil)
	send(t, env, "m", msg(1))
	putTopic(t, env, "m", map[string]any{"partitions": 1}, http.StatusCreated)
	bad, inv := http.StatusBadRequest, "invalid_request"
	runBadCases(t, env, []badCase{
		{"receive upper case", "POST", qpath("m", "/receive"), `{"MAX_MESSAGES": 5}`, nil, bad, inv},
		{"receive mixed case", "POST", qpath("m", "/receive"), `{"Max_Messages": 5}`, nil, bad, inv},
		{"receive duplicate", "POST", qpath("m", "/receive"), `{"max_messages": 1, "max_messages": 2}`, nil, bad, inv},
		{"put queue case", "PUT", qpath("m"), `{"Max_Receives": 3}`, nil, bad, inv},
		{"put queue duplicate", "PUT", qpath("m"), `{"max_receives": 3, "max_receives": 4}`, nil, bad, inv},
		{"put queue push case", "PUT", qpath("m"), `{"push": {"URL": "http://127.0.0.1:1/x"}}`, nil, bad, inv},
		{"put queue push duplicate", "PUT", qpath("m"), `{"push": {"url": "http://127.0.0.1:1/x", "url": "http://127.0.0.1:2/x"}}`, nil, bad, inv},
		{"send message case", "POST", qpath("m", "/messages"), `{"messages":[{"Body":1}]}`, nil, bad, inv},
		{"send top case", "POST", qpath("m", "/messages"), `{"MESSAGES":[{"body":1}]}`, nil, bad, inv},
		{"send duplicate in body", "POST", qpath("m", "/messages"), `{"messages":[{"body":{"a":1,"a":2}}]}`, nil, bad, inv},
		{"send duplicate deep in body", "POST", qpath("m", "/messages"), `{"messages":[{"body":[{"x":{"a":1,"b":2,"\u0061":3}}]}]}`, nil, bad, inv},
		{"send duplicate attribute", "POST", qpath("m", "/messages"), `{"messages":[{"body":1,"attributes":{"a":"1","a":"2"}}]}`, nil, bad, inv},
		{"send duplicate field", "POST", qpath("m", "/messages"), `{"messages":[{"body":1,"body":2}]}`, nil, bad, inv},
		{"publish case", "POST", tpath("m", "/events"), `{"events":[{"Type":"t"}]}`, nil, bad, inv},
		{"publish duplicate in data", "POST", tpath("m", "/events"), `{"events":[{"type":"t","data":{"a":1,"a":1}}]}`, nil, bad, inv},
		{"subscription filter case", "PUT", spath("m", "f"), `{"filter":{"Types":["a"]}}`, nil, bad, inv},
		{"subscription filter duplicate", "PUT", spath("m", "f"), `{"filter":{"types":["a"],"types":["b"]}}`, nil, bad, inv},
		{"subscription case", "PUT", spath("m", "f"), `{"Ordered": true}`, nil, bad, inv},
		{"poll case", "POST", gpath("m", "g", "/poll"), `{"Consumer":"c"}`, nil, bad, inv},
	})
	requireProblem(t, env.Do("GET", spath("m", "f"), nil), http.StatusNotFound, "not_found")
	require.Empty(t, readEvents(t, env, "m", "").Events)
	// Escapes spell the same name: "max\u005fmessages" is max_messages.
	r := env.Do("POST", qpath("m", "/receive"), `{"max\u005fmessages": 1}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

func edgeNUL(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "z", nil)
	putTopic(t, env, "z", map[string]any{"partitions": 1}, http.StatusCreated)
	bad, inv := http.StatusBadRequest, "invalid_request"
	cases := []badCase{}
	for _, v := range []struct{ name, body, data, attrs string }{
		{"NUL in a string", `"a\u0000b"`, `"a\u0000b"`, `{"k":"a\u0000b"}`},
		{"NUL in a key", `{"a\u0000":1}`, `{"a\u0000":1}`, `{"k\u0000":"v"}`},
		{"lone high surrogate", `"\ud800"`, `"\ud800x"`, `{"k":"\ud800"}`},
		{"lone low surrogate", `["\udc00"]`, `["\udc00"]`, `{"k":"\udc00"}`},
	} {
		cases = append(cases,
			badCase{"message body: " + v.name, "POST", qpath("z", "/messages"), `{"messages":[{"body":` + v.body + `}]}`, nil, bad, inv},
			badCase{"message attributes: " + v.name, "POST", qpath("z", "/messages"), `{"messages":[{"body":1,"attributes":` + v.attrs + `}]}`, nil, bad, inv},
			badCase{"event data: " + v.name, "POST", tpath("z", "/events"), `{"events":[{"type":"t","data":` + v.data + `}]}`, nil, bad, inv},
			badCase{"event attributes: " + v.name, "POST", tpath("z", "/events"), `{"events":[{"type":"t","attributes":` + v.attrs + `}]}`, nil, bad, inv},
		)
	}
	runBadCases(t, env, cases)
	require.Empty(t, readEvents(t, env, "z", "").Events)
	// A pair of surrogates is one character, and an escaped backslash is text.
	send(t, env, "z", msg(json.RawMessage(`"\ud83d\ude00 \\u0000"`)))
	publishEvents(t, env, "z", evt("t", "data", json.RawMessage(`"\ud83d\ude00 \\u0000"`)))
}

func edgeTraceparent(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "tp", nil)
	putTopic(t, env, "tp", map[string]any{"partitions": 1}, http.StatusCreated)
	const (
		trace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent = "00f067aa0ba902b7"
	)
	var cases []badCase
	for _, v := range []string{
		"garbage", "", "00-" + strings.ToUpper(trace) + "-" + parent + "-01", "00-" + strings.Repeat("0", 32) + "-" + parent + "-01",
		"00-" + trace + "-" + strings.Repeat("0", 16) + "-01", "ff-" + trace + "-" + parent + "-01", "00-" + trace + "-" + parent + "-01-x",
		"00-" + trace + "-" + parent + "-1", "00-" + trace[1:] + "-" + parent + "-01", "00_" + trace + "_" + parent + "_01",
		"00-" + trace + "-" + parent + "-01\n", " 00-" + trace + "-" + parent + "-01", "0g-" + trace + "-" + parent + "-01",
	} {
		attrs := map[string]string{"traceparent": v}
		cases = append(cases,
			badCase{"send " + strconv.Quote(v), "POST", qpath("tp", "/messages"), map[string]any{"messages": []any{msg(1, "attributes", attrs)}},
				nil, http.StatusBadRequest, "invalid_request"},
			badCase{"publish " + strconv.Quote(v), "POST", tpath("tp", "/events"), map[string]any{"events": []any{evt("t", "attributes", attrs)}},
				nil, http.StatusBadRequest, "invalid_request"})
	}
	runBadCases(t, env, cases)
	require.Empty(t, readEvents(t, env, "tp", "").Events)
	for _, v := range []string{"00-" + trace + "-" + parent + "-01", "00-" + trace + "-" + parent + "-00", "cc-" + trace + "-" + parent + "-01-future"} {
		send(t, env, "tp", msg(1, "attributes", map[string]string{"traceparent": v}))
		publishEvents(t, env, "tp", evt("t", "attributes", map[string]string{"traceparent": v}))
	}
}

func edgeQueryParams(t *testing.T) {
	env := ferrytest.Start(t)
	putQueue(t, env, "q", nil)
	putTopic(t, env, "t", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "t", "s", nil, http.StatusCreated)
	gpoll(t, env, "t", "g", "c", nil)
	bad, inv := http.StatusBadRequest, "invalid_request"
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/queues", ""}, {"GET", qpath("q"), ""}, {"PUT", qpath("q"), "{}"}, {"DELETE", qpath("q"), ""},
		{"POST", qpath("q", "/messages"), `{"messages":[{"body":1}]}`}, {"DELETE", qpath("q", "/messages"), ""},
		{"POST", qpath("q", "/receive"), "{}"}, {"POST", qpath("q", "/ack"), `{"receipts":["x"]}`},
		{"GET", qpath("q", "/dead-letters"), ""}, {"DELETE", qpath("q", "/dead-letters"), ""},
		{"POST", qpath("q", "/dead-letters/redrive"), `{"limit":1}`}, {"GET", qpath("q", "/attempts"), ""},
		{"GET", "/v1/topics", ""}, {"GET", tpath("t"), ""}, {"PUT", tpath("t"), "{}"},
		{"POST", tpath("t", "/events"), `{"events":[{"type":"x"}]}`}, {"GET", tpath("t", "/events"), ""},
		{"GET", tpath("t", "/subscriptions"), ""}, {"GET", spath("t", "s"), ""}, {"PUT", spath("t", "s"), "{}"},
		{"POST", spath("t", "s", "/receive"), "{}"}, {"GET", spath("t", "s", "/dead-letters"), ""},
		{"POST", spath("t", "s", "/seek"), `{"to":"latest"}`},
		{"GET", tpath("t", "/groups"), ""}, {"GET", gpath("t", "g"), ""}, {"POST", gpath("t", "g", "/poll"), `{"consumer":"c"}`},
		{"POST", gpath("t", "g", "/seek"), `{"to":"latest"}`}, {"POST", gpath("t", "g", "/leave"), `{"consumer":"c"}`},
		{"GET", "/healthz", ""}, {"GET", "/readyz", ""}, {"GET", "/metrics", ""}, {"GET", "/openapi.yaml", ""},
	}
	var cases []badCase
	for _, rt := range routes {
		var body any
		if rt.body != "" {
			body = rt.body
		}
		for _, q := range []string{"?bogus=1", "?LIMIT=1", "?x", "?%zz=1"} {
			cases = append(cases, badCase{rt.method + " " + rt.path + q, rt.method, rt.path + q, body, nil, bad, inv})
		}
	}
	cases = append(cases,
		badCase{"repeated limit", "GET", qpath("q", "/dead-letters?limit=1&limit=2"), nil, nil, bad, inv},
		badCase{"repeated partition", "GET", tpath("t", "/events?partition=0&partition=0"), nil, nil, bad, inv})
	runBadCases(t, env, cases)
	requireProblem(t, env.Do("GET", "/v1/queues?bogus=1", nil), bad, inv)

	// The list routes take limit and after (pagination).
	for _, p := range []string{"/v1/queues", "/v1/topics", tpath("t", "/subscriptions"), tpath("t", "/groups")} {
		r := env.Do("GET", p+"?limit=10", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", p, r.Body)
	}
	require.Equal(t, http.StatusOK, env.Do("GET", qpath("q", "/dead-letters?limit=5"), nil).Status)
	require.Equal(t, http.StatusOK, env.Do("GET", tpath("t", "/events?partition=0&from_offset=0&limit=5&wait_seconds=0"), nil).Status)
}

func edgeHeadAndEscapes(t *testing.T) {
	env := ferrytest.Start(t)
	v := openapitest.New(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		r := rawDo(t, env, "HEAD", path, nil, nil)
		require.Equal(t, http.StatusOK, r.Status, "HEAD %s", path)
		require.Empty(t, r.Body)
		r = env.DoWith("HEAD", path, nil, http.Header{})
		require.Equal(t, http.StatusOK, r.Status, "HEAD %s through the validating client", path)
	}
	for _, target := range []string{"/v1/queues/%zz", "/v1/queues/q%2", "/healthz%", "/v1/%ZZ/x"} {
		raw, _, _ := rawExchange(t, env, "GET "+target+" HTTP/1.1\r\nHost: ferry\r\nAuthorization: Bearer "+ferrytest.AdminKey+"\r\n\r\n", 5*time.Second)
		resp, body := parseRaw(t, raw)
		v.CheckProblem(t, resp.StatusCode, resp.Header, body)
		requireProblem(t, ferrytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, http.StatusBadRequest, "invalid_request")
	}
}

func edgeMetricsCache(t *testing.T) {
	env := ferrytest.Start(t, func(c *server.Config) { c.MetricsInterval = time.Hour })
	putQueue(t, env, "mq", nil)
	const scrapes = 16
	var wg sync.WaitGroup
	bodies := make([]asyncResult, scrapes)
	for i := range scrapes {
		wg.Add(1)
		go func() { defer wg.Done(); bodies[i] = getAsync(env, "/metrics") }()
	}
	wg.Wait()
	for _, b := range bodies {
		require.NoError(t, b.err)
		require.Equal(t, http.StatusOK, b.status)
		require.Contains(t, string(b.body), `ferry_queue_messages{queue="mq",state="available"} 0`, "every scrape has the gauges")
	}
	m, _ := metrics(t, env)
	require.Equal(t, 1.0, m["ferry_metrics_refreshes_total"], "%d scrapes within the interval read the database once", scrapes+1)

	// After the interval, the next scrape reads the database again.
	short := ferrytest.Start(t, func(c *server.Config) { c.MetricsInterval = 200 * time.Millisecond })
	m, _ = metrics(t, short)
	require.Equal(t, 1.0, m["ferry_metrics_refreshes_total"])
	putQueue(t, short, "late", nil)
	require.Eventually(t, func() bool {
		m, _ := metrics(t, short)
		_, ok := m[`ferry_queue_messages{queue="late",state="available"}`]
		return ok && m["ferry_metrics_refreshes_total"] >= 2
	}, 10*time.Second, 50*time.Millisecond)
}
