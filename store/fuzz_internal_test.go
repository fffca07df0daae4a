package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// Fuzz targets for the store's parsers of client input: receipts, message
// ids and subscription filters (with the Go matcher). `make fuzz` runs
// each for a while; `go test` runs their seeds (f.Add and
// testdata/fuzz/<target>/). None touches a database: fuzzing workers run
// without one (internal/testkit/pgtest).

// FuzzReceipt: a string ParseReceipt accepts is exactly the encoding of
// the receipt it reads (one spelling per receipt; no character of it can
// change and still name the same claim), and every receipt reads back from
// its encoding.
func FuzzReceipt(f *testing.F) {
	for _, r := range []Receipt{{1, 1}, {123456789, -42}, {-1, 0}, {1<<63 - 1, -1 << 63}} {
		s := r.String()
		f.Add(s, r.MessageID, r.Token)
		f.Add(s[:len(s)-1]+"B", r.MessageID, r.Token)
		f.Add(s+"=", int64(0), int64(0))
		f.Add(s[:4]+"\n"+s[4:], int64(0), int64(0))
		f.Add(base64.StdEncoding.EncodeToString([]byte(s)), int64(0), int64(0))
	}
	f.Add("", int64(0), int64(0))
	f.Add("AAAAAAAAAAAAAAAAAAAAAA", int64(0), int64(0))
	f.Add("AAAAAAAAAAAAAAAAAAAAAA==", int64(0), int64(0))
	f.Add("AAAAAAAAAAAAAAAAAAAA+/", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, s string, id, token int64) {
		if r, err := ParseReceipt(s); err == nil {
			require.Equal(t, s, r.String(), "a second spelling of receipt %+v", r)
		} else {
			require.Equal(t, Receipt{}, r)
		}

		r := Receipt{MessageID: id, Token: token}
		enc := r.String()
		require.Len(t, enc, 22)
		require.Equal(t, enc, url.PathEscape(enc), "a receipt needs no escaping")
		got, err := ParseReceipt(enc)
		require.NoError(t, err)
		require.Equal(t, r, got)
		// Change one character: the last (whose low bits a lax decoder
		// ignores) and another the fuzzer picks.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		for _, i := range []int{len(enc) - 1, int(uint64(token) % uint64(len(enc)))} {
			for _, c := range []byte(alphabet) {
				if c == enc[i] {
					continue
				}
				forged := enc[:i] + string(c) + enc[i+1:]
				if fr, err := ParseReceipt(forged); err == nil {
					require.NotEqual(t, r, fr, "%q also names receipt %q", forged, enc)
				}
			}
		}
	})
}

// FuzzMessageID: an id ParseMessageID accepts is positive and written
// exactly as FormatMessageID writes it; every positive id reads back, no
// other one does.
func FuzzMessageID(f *testing.F) {
	for _, s := range []string{"1", "42", "9223372036854775807", "9223372036854775808", "0", "-1", "+1", "01", " 1", "1 ", "", "1_0", "0x1", "١"} {
		f.Add(s, int64(len(s)))
	}
	f.Add("", int64(-1<<63))
	f.Fuzz(func(t *testing.T, s string, id int64) {
		if got, ok := ParseMessageID(s); ok {
			require.Positive(t, got)
			require.Equal(t, s, FormatMessageID(got), "a second spelling of id %d", got)
		}
		got, ok := ParseMessageID(FormatMessageID(id))
		require.Equal(t, id > 0, ok, "id %d", id)
		if ok {
			require.Equal(t, id, got)
		}
	})
}

// typeMatches is the documented meaning of a type pattern, by words and
// without regular expressions: "*" is exactly one word, "#" zero or more,
// any other word itself. rest[j] tells whether the pattern's words from i
// on match the type's from j on, for i from the last word back.
func typeMatches(pattern, typ string) bool {
	p, w := strings.Split(pattern, "."), strings.Split(typ, ".")
	rest := make([]bool, len(w)+1)
	rest[len(w)] = true // no pattern words left match no type words left
	for i := len(p) - 1; i >= 0; i-- {
		next := make([]bool, len(w)+1)
		for j := len(w); j >= 0; j-- {
			switch {
			case p[i] == "#":
				next[j] = rest[j] || (j < len(w) && next[j+1])
			case j == len(w):
			case p[i] == "*" || p[i] == w[j]:
				next[j] = rest[j+1]
			}
		}
		rest = next
	}
	return rest[0]
}

// typesAndAttributesMatch is the documented meaning of a filter's types and
// attributes (not its data).
func typesAndAttributesMatch(f *Filter, typ string, attrs map[string]string) bool {
	if len(f.Types) > 0 && !slicesAny(f.Types, func(p string) bool { return typeMatches(p, typ) }) {
		return false
	}
	for k, vs := range f.Attributes {
		v, ok := attrs[k]
		if !ok || !slicesAny(vs, func(w string) bool { return w == v }) {
			return false
		}
	}
	return true
}

func abbreviate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

func slicesAny(s []string, fn func(string) bool) bool {
	for _, v := range s {
		if fn(v) {
			return true
		}
	}
	return false
}

// matchBudget bounds one match of one event: the worst filter
// ParseFilter accepts costs tens of microseconds against the worst type
// (typeMatcher), so even a -race build on a loaded machine stays far
// below it; more means a blow-up that would slow every publish.
const matchBudget = 100 * time.Millisecond

// FuzzFilter: ParseFilter refuses with a ValidationError or accepts; an
// accepted filter's stored form reads back as the same filter and
// matches the same; matching any event terminates within matchBudget and
// gives the same answer on a fresh event and on one already decoded; and
// for the events publish accepts, types and attributes match as
// documented (the compiled alternation and the one-pattern regexps that
// SQL runs agreeing).
func FuzzFilter(f *testing.F) {
	long := strings.Repeat("#.a.", 63) + "#"
	for _, s := range []struct{ filter, typ, attrs, data string }{
		{`{"types":["order.*","#.created"]}`, "order.created", ``, ``},
		{`{"types":["order.#"]}`, "order", ``, ``},
		{`{"types":["order.*"]}`, "order", ``, ``},
		{`{"types":["order.*"]}`, "order.item.added", ``, ``},
		{`{"types":["#.created"]}`, "a.recreated", ``, ``},
		{`{"types":["a.*.c","x"]}`, "a..c", ``, ``},
		{`{"types":["#"]}`, "", ``, ``},
		{`{"types":["*.*"]}`, ".", ``, ``},
		{`{"types":["a+b.(c)", "[x]", "^$", "\\d"]}`, "a+b.(c)", ``, ``},
		{`{"types":["` + long + `"]}`, strings.Repeat("a.", 127) + "b", ``, ``},
		{`{"types":["#.#.#.*.#.#"]}`, "a.b.c", ``, ``},
		{`{"types":["é.*"]}`, "é.ü", ``, ``},
		{`{"types":["order*"]}`, "order", ``, ``},
		{`{"types":[]}`, "x", ``, ``},
		{`{"attributes":{"region":["eu","us"]}}`, "t", `{"region":"eu"}`, ``},
		{`{"attributes":{"region":["eu"]}}`, "t", `{"region":"EU"}`, ``},
		{`{"attributes":{"region":["eu"]}}`, "t", `{"tier":"eu"}`, ``},
		{`{"attributes":{"":["x"]}}`, "t", `{"":"x"}`, ``},
		{`{"data":{"a.0.b":[1,"x",true,null]}}`, "t", ``, `{"a":[{"b":1.0}]}`},
		{`{"data":{"n":[1e308]}}`, "t", ``, `{"n":1e308}`},
		{`{"data":{"n":[1e-400]}}`, "t", ``, `{"n":1e-400}`},
		{`{"data":{"n":[0]}}`, "t", ``, `{"n":-0e5}`},
		{`{"data":{"a.-1":[1]}}`, "t", ``, `{"a":[1]}`},
		{`{"data":{"a.01":[1]}}`, "t", ``, `{"a":[1,1]}`},
		{`{"data":{"a":[{}]}}`, "t", ``, `{"a":{}}`},
		{`{"data":{"a":["x"]}}`, "t", ``, `not json`},
		{`{"types":["a"],"x":1}`, "a", ``, ``},
		{`null`, "t", `{"a":1}`, `[1,2]`},
		{``, "t", ``, ``},
	} {
		f.Add([]byte(s.filter), s.typ, []byte(s.attrs), []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, raw []byte, typ string, attrs, data []byte) {
		flt, err := ParseFilter(raw)
		if err != nil {
			var verr *ValidationError
			require.True(t, errors.As(err, &verr), "%v is not a ValidationError", err)
			require.True(t, strings.HasPrefix(verr.Field, "filter") && verr.Message != "", "%+v", verr)
			return
		}
		// The stored form reads back as the same filter.
		stored := flt.JSON()
		again, err := ParseFilter(stored)
		require.NoError(t, err, "the stored form %s does not read back", stored)
		require.Equal(t, string(stored), string(again.JSON()))

		if len(typ) > 256 {
			typ = typ[:256] // publish takes types of at most 256 bytes
		}
		event := func() *matchEvent { return &matchEvent{typ: typ, rawAttrs: attrs, rawData: data} }
		e := event()
		start := time.Now()
		got := flt.match(e)
		require.Less(t, time.Since(start), matchBudget, "matching %s against type %q took too long", abbreviate(raw), abbreviate([]byte(typ)))
		require.Equal(t, got, flt.match(e), "matching again, the event decoded")
		require.Equal(t, got, again.match(event()), "the stored form matches otherwise")

		var attrMap map[string]string
		publishable := typ != "" && utf8.ValidString(typ) && !strings.ContainsRune(typ, 0) &&
			(len(attrs) == 0 || json.Unmarshal(attrs, &attrMap) == nil)
		if !publishable {
			return
		}
		want := typesAndAttributesMatch(flt, typ, attrMap)
		if len(flt.Data) == 0 {
			require.Equal(t, want, got, "filter %s, type %q, attributes %s", raw, typ, attrs)
		} else if !want {
			require.False(t, got, "filter %s, type %q, attributes %s", raw, typ, attrs)
		}
	})
}
