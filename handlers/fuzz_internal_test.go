package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/rules"
	"github.com/ferry-mq/ferry/store"
)

// Fuzz targets for the HTTP edge's parsers: request decoding (strict JSON,
// the numeric rule, size counting, attributes), names and list cursors.
// `make fuzz` runs each for a while; `go test` runs their seeds (f.Add and
// testdata/fuzz/<target>/). None touches a database: fuzzing workers run
// without one (internal/testkit/pgtest). Each asserts what the contract promises,
// mostly against an oracle worked out another way (fuzz_oracle_internal_test.go).

// requireClientProblem: err is a client's mistake, a complete 4xx problem
// (never a 5xx, whatever the input).
func requireClientProblem(t *testing.T, err error, what string) {
	t.Helper()
	p := toProblem(err)
	require.True(t, p.Status >= 400 && p.Status <= 499, "%s: %v is a %d", what, err, p.Status)
	require.Equal(t, "urn:ferry:problem:"+p.Code, p.Type, what)
	require.NotEmpty(t, p.Title, what)
	require.NotEmpty(t, p.Detail, what)
	require.NotEqual(t, codeInternal, p.Code, what)
}

// fuzzRoute is a request body one of Ferry's routes decodes, with the
// checks its handler makes before it touches the database.
type fuzzRoute struct {
	name string
	typ  reflect.Type // what the body is decoded into
	run  func(t *testing.T, h *handler, c echo.Context) (decodeErr error, checkErrs []error)
}

func route[T any](name string, optional bool, check func(t *testing.T, h *handler, req *T) []error) fuzzRoute {
	return fuzzRoute{name: name, typ: reflect.TypeFor[*T](), run: func(t *testing.T, h *handler, c echo.Context) (error, []error) {
		req := new(T)
		if err := h.decode(c, req, optional); err != nil || check == nil {
			return err, nil
		}
		return nil, check(t, h, req)
	}}
}

func checkReceipts(h *handler, raw []string) []error {
	_, err := h.parseReceipts(raw)
	return []error{err}
}

// checkPush runs pushPatch's checks of the push member that need neither
// the database (what the target pushes to now) nor a resolver (checking a
// URL resolves its host, which fuzzing must not).
func checkPush(raw json.RawMessage) error {
	if raw == nil || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	_, err := decodePush(raw)
	return err
}

func checkStart(field string, v *string) error {
	if v == nil {
		return nil
	}
	_, err := parseStart(field, *v)
	return err
}

// fuzzRoutes are the request bodies of every route that reads one.
func fuzzRoutes() []fuzzRoute {
	fuzzTopic := store.Topic{TopicConfig: store.TopicConfig{Partitions: 4}}
	return []fuzzRoute{
		route("send", false, func(t *testing.T, h *handler, req *sendRequest) []error {
			msgs, err := h.toSendMessages(req.Messages)
			if err == nil {
				for i, m := range msgs {
					requireWithinLimit(t, h, req.Messages[i].Body, m.Body, m.Attributes)
				}
			}
			return []error{err}
		}),
		route[receiveRequest]("receive", true, nil),
		route("ack", false, func(_ *testing.T, h *handler, req *receiptsRequest) []error { return checkReceipts(h, req.Receipts) }),
		route("nack", false, func(_ *testing.T, h *handler, req *nackRequest) []error { return checkReceipts(h, req.Receipts) }),
		route("extend", false, func(_ *testing.T, h *handler, req *extendRequest) []error { return checkReceipts(h, req.Receipts) }),
		route("queue", true, func(_ *testing.T, h *handler, req *queueRequest) []error {
			return []error{req.validate(), checkPush(json.RawMessage(req.Push))}
		}),
		route[topicRequest]("topic", true, nil),
		route("publish", false, func(t *testing.T, h *handler, req *publishRequest) []error {
			events, err := h.toPublishEvents(req.Events)
			if err == nil {
				for i, e := range events {
					if e.Data != nil {
						requireWithinLimit(t, h, req.Events[i].Data, e.Data, e.Attributes)
					}
				}
			}
			return []error{err}
		}),
		route("subscription", true, func(_ *testing.T, h *handler, req *subscriptionRequest) []error {
			errs := []error{checkStart("start", req.Start), checkPush(json.RawMessage(req.Push))}
			if req.Filter != nil {
				_, err := store.ParseFilter([]byte(req.Filter))
				errs = append(errs, err)
			}
			return errs
		}),
		route("seek", false, func(_ *testing.T, _ *handler, req *seekRequest) []error { return []error{checkStart("to", req.To)} }),
		route[redriveRequest]("redrive", false, nil),
		route("poll", false, func(_ *testing.T, _ *handler, req *pollRequest) []error {
			_, err := consumerName(req.Consumer)
			return []error{err, checkStart("start", req.Start)}
		}),
		route("commit", false, func(_ *testing.T, _ *handler, req *commitRequest) []error {
			_, err := consumerName(req.Consumer)
			_, errOffsets := partitionOffsets("offsets", req.Offsets, fuzzTopic, 0)
			return []error{err, errOffsets}
		}),
		route("leave", false, func(_ *testing.T, _ *handler, req *leaveRequest) []error {
			_, err := consumerName(req.Consumer)
			return []error{err}
		}),
		route("group-seek", false, func(_ *testing.T, _ *handler, req *consumerGroupSeekRequest) []error {
			var err error
			if req.Offsets != nil {
				_, err = partitionOffsets("offsets", req.Offsets, fuzzTopic, 0)
			}
			return []error{err, checkStart("to", req.To)}
		}),
	}
}

// requireWithinLimit: an accepted body (data) and its attributes count at
// most the body limit, numbers as PostgreSQL writes them, and the body kept
// is the one sent, compacted or not.
func requireWithinLimit(t *testing.T, h *handler, sent, kept, attrs json.RawMessage) {
	t.Helper()
	var a, b bytes.Buffer
	require.NoError(t, json.Compact(&a, sent))
	require.NoError(t, json.Compact(&b, kept))
	require.Equal(t, a.String(), b.String(), "the body kept is the body sent")
	if size, ok := storedSizeOracle(sent); ok {
		require.LessOrEqual(t, size+int64(len(attrs)), int64(h.limits.MaxBodyBytes), "accepted over the limit: %s", sent)
	}
}

// FuzzDecode sends any body, with any Content-Type, to every route that
// reads one: the answer is never a 5xx; a body accepted is valid UTF-8
// JSON with no duplicate member, no member name that differs from a
// field's, no \u0000 and only numbers PostgreSQL stores; and a body that
// is all of that and decodes into the request type passes the strict pass.
func FuzzDecode(f *testing.F) {
	routes := fuzzRoutes()
	index := func(name string) uint8 {
		for i, r := range routes {
			if r.name == name {
				return uint8(i)
			}
		}
		panic(name)
	}
	for _, s := range []struct{ route, ct, body string }{
		{"send", "application/json", `{"messages":[{"body":{"a":[1,2.5,-0e3,"x"]},"attributes":{"k":"v"},"group":"g","dedup_id":"d","delay_seconds":5}]}`},
		{"send", "application/json", `{"messages":[{"body":1,"deliver_at":"2030-01-01T00:00:00Z"}]}`},
		{"send", "", `{"MESSAGES":[{"body":1}]}`},
		{"send", "", `{"messages":[{"body":1,"body":2}]}`},
		{"send", "", `{"messages":[{"body":{"a":1,"a":2}}]}`},
		{"send", "", `{"messages":[{"body":"\u0000"}]}`},
		{"send", "", `{"messages":[{"body":"\ud800"}]}`},
		{"send", "", `{"messages":[{"body":0e-16384}]}`},
		{"send", "", `{"messages":[{"body":[1e299]}]}`},
		{"send", "", `{"messages":[{"body":1,"attributes":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}]}`},
		{"send", "", `{"messages":[{"body":1,"attributes":{"traceparent":"bogus"}}]}`},
		{"send", "", `{"messages":[{"body":1},{"body":2},{"body":3},{"body":4}]}`},
		{"send", "text/plain", `{"messages":[{"body":1}]}`},
		{"send", "application/problem+json; charset=utf-8", `{"messages":[]}`},
		{"send", "", "{\"messages\":[{\"body\":\"\xff\"}]}"},
		{"send", "", `null`},
		{"send", "", ` `},
		{"send", "", `{"messages":[{"body":1}]} {}`},
		{"receive", "", ``},
		{"receive", "", `{"max_messages":10,"visibility_timeout_seconds":30,"wait_seconds":1e1}`},
		{"receive", "", `{"max_messages":1.5}`},
		{"receive", "", `{"max_messages":99999999999999999999}`},
		{"ack", "", `{"receipts":["AAAAAAAAAAEAAAAAAAAAAQ"]}`},
		{"ack", "", `{"receipts":["AAAAAAAAAAEAAAAAAAAAAR"]}`},
		{"nack", "", `{"receipts":["AAAAAAAAAAEAAAAAAAAAAQ"],"delay_seconds":0,"error":"e","dead_letter":true}`},
		{"extend", "", `{"receipts":[],"visibility_timeout_seconds":0}`},
		{"queue", "", `{"visibility_timeout_seconds":30,"max_depth":1000000000000,"push":null}`},
		{"queue", "", `{"push":{"timeout_seconds":5,"max_in_flight":2,"rate_limit_per_second":0}}`},
		{"queue", "", `{"push":{"URL":"http://x"}}`},
		{"topic", "", `{"partitions":4,"retention_seconds":3600,"dedup_window_seconds":0}`},
		{"publish", "", `{"events":[{"id":"e1","type":"order.created","key":"k","data":{"n":1e131071},"attributes":{"a":"b"}}]}`},
		{"publish", "", `{"events":[{"type":"t","data":null}]}`},
		{"subscription", "", `{"filter":{"types":["order.*","#.created"],"attributes":{"a":["b"]},"data":{"x.0":[1,"s",true,null]}},"ordered":true,"start":"earliest"}`},
		{"subscription", "", `{"filter":{"data":{"x":[1e-16384]}}}`},
		{"subscription", "", `{"filter":{"Types":["a"]}}`},
		{"subscription", "", `{"filter":null,"start":"2024-01-01T00:00:00.5+02:00"}`},
		{"seek", "", `{"to":"latest"}`},
		{"redrive", "", `{"ids":["1","01"],"limit":1}`},
		{"poll", "", `{"consumer":"c-1","max_events":10,"wait_seconds":0,"session_timeout_seconds":30,"start":"latest"}`},
		{"commit", "", `{"consumer":"c","generation":1,"offsets":{"0":5,"3":1,"4":1,"-0":1}}`},
		{"group-seek", "", `{"to":"earliest","offsets":{"1":0}}`},
		{"group-seek", "", `{"offsets":{"1":-1}}`},
	} {
		f.Add(index(s.route), s.ct, []byte(s.body))
	}
	// Small limits, so that the fuzzer reaches every 413.
	h := &handler{limits: Limits{MaxBodyBytes: 300, MaxBatch: 3, MaxRequestBytes: 2048}}
	e := echo.New()
	f.Fuzz(func(t *testing.T, routeIndex uint8, contentType string, body []byte) {
		r := routes[int(routeIndex)%len(routes)]
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set(echo.HeaderContentType, contentType)
		}
		decodeErr, checkErrs := r.run(t, h, e.NewContext(req, httptest.NewRecorder()))
		if decodeErr != nil {
			requireClientProblem(t, decodeErr, r.name+": decode")
		}
		for _, err := range checkErrs {
			if err != nil {
				requireClientProblem(t, err, r.name+": checks")
			}
		}
		if decodeErr == nil && len(bytes.TrimSpace(body)) > 0 {
			requireStrict(t, r, body)
		}
		requireStrictAccepts(t, r, body)
	})
}

// requireStrict: a body decode accepted keeps every rule of the strict
// pass, as the oracles read it.
func requireStrict(t *testing.T, r fuzzRoute, body []byte) {
	t.Helper()
	require.True(t, utf8.Valid(body), "%s accepted invalid UTF-8", r.name)
	require.True(t, json.Valid(body), "%s accepted invalid JSON: %q", r.name, body)
	facts := readJSONFacts(body)
	require.False(t, facts.duplicate, "%s accepted a duplicate member: %s", r.name, body)
	require.False(t, facts.nul, `%s accepted \u0000: %s`, r.name, body)
	for _, n := range facts.numbers {
		fits, _ := pgNumeric(n)
		require.True(t, fits, "%s accepted %s, which PostgreSQL cannot store", r.name, n)
	}
	tree := decodeTree(t, body)
	require.True(t, exactNames(tree, r.typ), "%s accepted a member name that is no field's: %s", r.name, body)
}

// decodeTree is the document as encoding/json reads it into any, numbers
// kept as written.
func decodeTree(t *testing.T, b []byte) any {
	var tree any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&tree))
	return tree
}

// requireStrictAccepts: the strict pass refuses nothing encoding/json
// takes (exact names given) that keeps its rules; surrogate escapes aside,
// which the oracles cannot see.
func requireStrictAccepts(t *testing.T, r fuzzRoute, body []byte) {
	t.Helper()
	if !utf8.Valid(body) || !json.Valid(body) || surrogateEscape.Match(body) {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(reflect.New(r.typ.Elem()).Interface()) != nil {
		return
	}
	tree := decodeTree(t, body)
	facts := readJSONFacts(body)
	if facts.duplicate || facts.nul || !exactNames(tree, r.typ) {
		return
	}
	for _, n := range facts.numbers {
		if fits, _ := pgNumeric(n); !fits {
			return
		}
	}
	require.NoError(t, checkJSON(body, r.typ, ""), "%s: the strict pass refused %s", r.name, body)
}

// FuzzCheckJSON runs the strict pass over any document as a free-form
// value (a body, event data): it finds a syntax error exactly where
// encoding/json does; what it accepts has no duplicate member, no
// \u0000, only numbers PostgreSQL stores and at most MaxValueDepth
// levels; what it refuses, surrogate escapes aside, breaks one of those
// rules; and the size it counts for an
// accepted value is the compact encoding with numbers as PostgreSQL
// writes them.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `""`, `0`, `-0`, `null`, `true`, ` {"a" : [1, 2.5e3, {"b": null}]} `,
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":{"b":1,"b":2}}`, `[{"a":1},{"a":1}]`,
		`"\u0000"`, `{"\u0000":1}`, `"\\u0000"`, `"\ud800"`, `"\udc00\ud800"`, `"\ud83d\ude00"`, `"\uD83D\uDE00"`,
		`0e-16384`, `0e-16383`, `1e131071`, `1e131072`, `-1.5e-16382`, `1e1073741823`, `0e1073741822`, `1e99999999999999999999`,
		`1E+2`, `1.0e2`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `-`, `1e`, `"\x"`, `"\u12"`, "\"a\tb\"", `tru`, `[`, `{"a"}`,
		strings.Repeat("[", MaxValueDepth) + strings.Repeat("]", MaxValueDepth),
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"a":10}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := checkJSON(b, nil, "")
		valid := json.Valid(b)
		if errors.Is(err, errSyntax) || !valid {
			require.Equal(t, valid, err == nil, "the strict pass and encoding/json disagree on %q: %v", b, err)
			return
		}
		if !utf8.Valid(b) {
			return // decode refuses it first; encoding/json reads its names as U+FFFD
		}
		facts := readJSONFacts(b)
		broken := facts.duplicate || facts.nul || facts.depth > MaxValueDepth
		for _, n := range facts.numbers {
			if fits, _ := pgNumeric(n); !fits {
				broken = true
			}
		}
		if err != nil {
			var p *Problem
			require.ErrorAs(t, err, &p)
			require.Equal(t, http.StatusBadRequest, p.Status)
			require.Len(t, p.Errors, 1)
			require.True(t, broken || surrogateEscape.Match(b), "refused %q: %v", b, err)
			return
		}
		require.False(t, broken, "accepted %q", b)
		if want, ok := storedSizeOracle(b); ok {
			require.Equal(t, want, storedSize(b), "the size of %q", b)
		}
	})
}

// FuzzNumber reads any text as a number: scanNumber takes exactly RFC
// 8259's grammar, and says whether PostgreSQL stores the number, and how
// long PostgreSQL writes it, as the big-integer oracle does.
func FuzzNumber(f *testing.F) {
	for _, s := range []string{
		"0", "-0", "1", "-1", "0.0", "10", "9.99", "0.01", "1.00000", "-1.5", "123456789", "1E+2", "1e-3", "1e00005",
		"0e-16383", "0e-16384", "1e-16383", "1.5e-16383", "0.1e-16382", "1e131071", "9.999e131071", "10e131071", "1e131072",
		"1e1073741822", "0e1073741822", "0e1073741823", "0e-1073741823", "1e9223372036854775807", "1e9223372036854775808",
		"1e000000000000000000000000000001", "1e100000000000000000", "00", "01", "1.", ".1", "-", "+1", "1e", "1e+", "1x", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, end, ok := scanNumber([]byte(s), 0)
		require.True(t, end >= 0 && end <= len(s), "end %d of %q", end, s)
		if jsonNumber.MatchString(s) {
			require.True(t, ok && end == len(s), "%q is a JSON number", s)
		}
		if !ok {
			return
		}
		lit := s[:end]
		require.True(t, jsonNumber.MatchString(lit), "%q is not a JSON number", lit)
		fits, text := pgNumeric(lit)
		require.Equal(t, fits, n.fits(), "does PostgreSQL store %s?", abbreviate(lit))
		if !fits || text == "" {
			return
		}
		require.Equal(t, int64(len(text)), n.written(), "%s is written %s", abbreviate(lit), abbreviate(text))
		// PostgreSQL's spelling is a number it stores the same.
		m, mend, mok := scanNumber([]byte(text), 0)
		require.True(t, mok && mend == len(text) && m.fits() && m.written() == int64(len(text)), "%s", abbreviate(text))
	})
}

// traceparentRe is W3C Trace Context's traceparent as ValidTraceparent
// documents it: lowercase hex version-trace-parent-flags, version ff
// invalid, ids not all zeros, and only a version after 00 followed by more
// (a dash, then visible ASCII).
var traceparentRe = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-[!-~]*)?$`)

func validTraceparentOracle(v string) bool {
	m := traceparentRe.FindStringSubmatch(v)
	return m != nil && m[1] != "ff" && strings.Trim(m[2], "0") != "" && strings.Trim(m[3], "0") != "" &&
		(m[1] != "00" || m[4] == "")
}

// FuzzAttributes checks any attributes: accepted exactly when every key
// is 1-256 bytes and every value at most 4096, neither holding NUL, and a
// traceparent is in the W3C format (so push can send it as a header).
func FuzzAttributes(f *testing.F) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, s := range [][3]string{
		{"k", "v", tp},
		{"k", "v", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later.version"},
		{"k", "v", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x"},
		{"k", "v", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{"k", "v", "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
		{"k", "v", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"},
		{"k", "v", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-\r\nX-Injected: 1"},
		{"k", "v", ""},
		{"", "v", tp},
		{"k\x00", "v", tp},
		{"k", "v\x00", tp},
		{strings.Repeat("k", 256), strings.Repeat("v", 4096), tp},
		{strings.Repeat("k", 257), "v", tp},
		{"k", strings.Repeat("v", 4097), tp},
		{"traceparent", "v", tp},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, key, value, traceparent string) {
		attrs := map[string]string{key: value, "traceparent": traceparent}
		want := validTraceparentOracle(attrs["traceparent"])
		for k, v := range attrs {
			want = want && k != "" && len(k) <= 256 && len(v) <= 4096 && !strings.Contains(k+v, "\x00")
		}
		var cs checks
		cs.attributes("attributes", attrs)
		require.Equal(t, want, cs.err() == nil, "attributes %q: %v", attrs, cs.err())
		if err := cs.err(); err != nil {
			requireClientProblem(t, err, "attributes")
		}
		require.Equal(t, validTraceparentOracle(traceparent), rules.ValidTraceparent(traceparent), "traceparent %q", traceparent)
	})
}

// nameOracle is API.md's name rule without a regular expression: 1-128
// bytes, an ASCII letter or digit first, then letters, digits, '.', '_'
// and '-'.
func nameOracle(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return true
}

// FuzzName checks any path parameter and consumer id as a name: accepted
// exactly when API.md's rule holds (a 400 naming the field otherwise);
// an accepted name needs no escaping in a path and survives a list cursor.
func FuzzName(f *testing.F) {
	for _, s := range []string{
		"a", "orders", "A-b_c.d", "0", strings.Repeat("x", 128), strings.Repeat("x", 129), "", ".a", "-a", "_a",
		"a b", "a/b", "a\n", "a\x00", "é", "a:b", "K", "ſ", "a%2F", "..",
	} {
		f.Add(s)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, s string) {
		want := nameOracle(s)
		require.Equal(t, want, nameRe.MatchString(s), "%q", s)

		c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
		c.SetParamNames("queue")
		c.SetParamValues(s)
		got, err := name(c, "queue")
		_, consumerErr := consumerName(&s)
		require.Equal(t, want, err == nil, "%q: %v", s, err)
		require.Equal(t, want, consumerErr == nil, "consumer %q: %v", s, consumerErr)
		if !want {
			requireClientProblem(t, err, "name")
			var p *Problem
			require.ErrorAs(t, err, &p)
			require.Equal(t, "queue", p.Errors[0].Field)
			return
		}
		require.Equal(t, s, got)
		require.Equal(t, s, url.PathEscape(s), "a name needs no escaping in a path")
		for _, kind := range listKinds() {
			after, ok := parseCursor(kind, formatCursor(kind, s))
			require.True(t, ok && after == s, "a %s cursor after %q", kind, s)
		}
	})
}

// listKinds are the lists that page with cursors (pageOf's kinds).
func listKinds() []string { return []string{"queues", "topics", "subscriptions", "groups"} }

// canonicalLimit is a positive integer without sign or leading zeros.
var canonicalLimit = regexp.MustCompile(`^[1-9][0-9]*$`)

// FuzzCursor sends any limit and after to a list: a cursor is accepted
// only when it is exactly one formatCursor made for this list (one
// spelling: it re-encodes to itself), and then names a valid name; a
// limit only when written canonically in 1-1000; anything else is a 400
// naming the parameter.
func FuzzCursor(f *testing.F) {
	const (
		hasAfter = 1 << iota
		hasLimit
	)
	for _, s := range []struct {
		kind         uint8
		after, limit string
		flags        uint8
	}{
		{0, formatCursor("queues", "orders"), "100", hasAfter | hasLimit},
		{1, formatCursor("topics", "a.b-c_d"), "1000", hasAfter | hasLimit},
		{2, formatCursor("queues", "orders"), "", hasAfter},
		{3, formatCursor("groups", "g") + "=", "1", hasAfter | hasLimit},
		{3, formatCursor("groups", "g")[:5] + "\n" + formatCursor("groups", "g")[5:], "", hasAfter},
		{0, "cXVldWVzOm9yZGVycw", "", hasAfter},
		{0, "cXVldWVzOm9yZGVycx", "", hasAfter},
		{0, formatCursor("queues", "a b"), "", hasAfter},
		{0, formatCursor("queues", ""), "", hasAfter},
		{0, "", "0", hasAfter | hasLimit},
		{0, "", "1001", hasLimit},
		{0, "", "+5", hasLimit},
		{0, "", "05", hasLimit},
		{0, "", "", hasLimit},
		{0, "", "99999999999999999999", hasLimit},
	} {
		f.Add(s.kind, s.after, s.limit, s.flags)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, kindIndex uint8, after, limit string, flags uint8) {
		kinds := listKinds()
		kind := kinds[int(kindIndex)%len(kinds)]
		name, ok := parseCursor(kind, after)
		if ok {
			require.Equal(t, after, formatCursor(kind, name), "a second spelling of a cursor")
			require.True(t, nameOracle(name), "cursor %q names %q", after, name)
			for _, other := range listKinds() {
				if other != kind {
					_, ok := parseCursor(other, after)
					require.False(t, ok, "a %s cursor accepted by %s", kind, other)
				}
			}
		}
		q := url.Values{}
		if flags&hasAfter != 0 {
			q.Set("after", after)
		}
		if flags&hasLimit != 0 {
			q.Set("limit", limit)
		}
		limitOK := flags&hasLimit == 0 || (canonicalLimit.MatchString(limit) && len(limit) < 4 || limit == "1000")
		afterOK := flags&hasAfter == 0 || ok

		c := e.NewContext(httptest.NewRequest(http.MethodGet, "/?"+q.Encode(), nil), httptest.NewRecorder())
		p, err := pageOf(c, kind)
		require.Equal(t, limitOK && afterOK, err == nil, "limit %q after %q: %v", limit, after, err)
		if err != nil {
			requireClientProblem(t, err, "page")
			var prob *Problem
			require.ErrorAs(t, err, &prob)
			require.Contains(t, []string{"limit", "after"}, prob.Errors[0].Field)
			return
		}
		require.Equal(t, kind, p.kind)
		if flags&hasAfter != 0 {
			require.Equal(t, name, p.after)
		}
		back, ok := parseCursor(kind, *p.next(true, "n"))
		require.True(t, ok && back == "n", "the next cursor reads back")
		require.Nil(t, p.next(false, "n"), "no cursor after the last page")
	})
}
