package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// The store_test package's TestMain (pgtest.Main) runs these tests too:
// internal and external tests of a package share one test binary.

func mustParseFilter(t *testing.T, raw string) *Filter {
	t.Helper()
	f, err := ParseFilter([]byte(raw))
	require.NoError(t, err, "filter %s", raw)
	return f
}

// filterEvent is an event as the matcher tests describe it: "" attrs or
// data means the event has none.
type filterEvent struct {
	typ   string
	attrs string
	data  string
	ce    string // the CloudEvents attributes (store.CloudAttrs), "" for none
}

func (e filterEvent) match() *matchEvent {
	m := &matchEvent{typ: e.typ}
	if e.ce != "" {
		m.rawCE = &e.ce
	}
	if e.attrs != "" {
		m.rawAttrs = json.RawMessage(e.attrs)
	}
	if e.data != "" {
		m.rawData = json.RawMessage(e.data)
	}
	return m
}

func (e filterEvent) String() string {
	return fmt.Sprintf("type=%q attributes=%s data=%s", e.typ, e.attrs, e.data)
}

// Type patterns: "*" is one word, "#" zero or more, anything else itself
// (regular-expression metacharacters included); patterns are ORed.
func TestFilterTypePatterns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		filter string
		typ    string
		want   bool
	}{
		{`{"types":["order.*"]}`, "order.created", true},
		{`{"types":["order.*"]}`, "order", false},
		{`{"types":["order.*"]}`, "orders.created", false},
		{`{"types":["order.*"]}`, "order.item.added", false},
		{`{"types":["order.*"]}`, "Order.created", false}, // case-sensitive
		{`{"types":["order.#"]}`, "order", true},
		{`{"types":["order.#"]}`, "order.a", true},
		{`{"types":["order.#"]}`, "order.a.b", true},
		{`{"types":["order.#"]}`, "orders", false},
		{`{"types":["order.#"]}`, "orders.a", false},
		{`{"types":["#"]}`, "a", true},
		{`{"types":["#"]}`, "a.b.c.d", true},
		{`{"types":["#"]}`, "order.item.added", true},
		{`{"types":["#.created"]}`, "created", true},
		{`{"types":["#.created"]}`, "a.created", true},
		{`{"types":["#.created"]}`, "a.b.created", true},
		{`{"types":["#.created"]}`, "a.created.x", false},
		{`{"types":["#.created"]}`, "a.recreated", false},
		{`{"types":["*"]}`, "a", true},
		{`{"types":["*"]}`, "a.b", false},
		{`{"types":["a.*.c"]}`, "a.b.c", true},
		{`{"types":["a.*.c"]}`, "a.c", false},
		{`{"types":["a.*.c"]}`, "a.b.b.c", false},
		{`{"types":["a.#.c"]}`, "a.c", true},
		{`{"types":["a.#.c"]}`, "a.b.b.c", true},
		{`{"types":["a+b.(c)"]}`, "a+b.(c)", true},
		{`{"types":["a+b.(c)"]}`, "aab.c", false},
		{`{"types":["a+b.(c)"]}`, "aab.(c)", false},
		{`{"types":["a.b"]}`, "axb", false}, // "." is not "any character"
		{`{"types":["a|b"]}`, "a", false},
		{`{"types":["a|b"]}`, "a|b", true},
		{`{"types":["[ab]"]}`, "a", false},
		{`{"types":["^a$"]}`, "^a$", true},
		{`{"types":["order.*","user.created"]}`, "order.paid", true},
		{`{"types":["order.*","user.created"]}`, "user.created", true},
		{`{"types":["order.*","user.created"]}`, "user.deleted", false},
		{`{"types":["x","#.deleted","a.*"]}`, "user.deleted", true},
		{`null`, "anything.at.all", true},
		{`{}`, "anything", true},
	}
	for _, c := range cases {
		f := mustParseFilter(t, c.filter)
		require.Equal(t, c.want, f.match(&matchEvent{typ: c.typ}), "filter %s, type %q", c.filter, c.typ)
	}
}

// ParseFilter refuses what the contract refuses, with a ValidationError,
// and reads null and {} as the empty filter.
func TestParseFilterValidation(t *testing.T) {
	t.Parallel()
	var many []string
	for i := range maxFilterTypes + 1 {
		many = append(many, fmt.Sprintf("t%d", i))
	}
	tooMany, err := json.Marshal(map[string]any{"types": many})
	require.NoError(t, err)
	hundred, err := json.Marshal(map[string]any{"types": many[:maxFilterTypes]})
	require.NoError(t, err)

	refused := []string{
		`{"type":["a"]}`, // unknown member
		`{"types":["a"],"x":1}`,
		`{"types":["order*"]}`, // wildcard inside a word
		`{"types":["*order"]}`,
		`{"types":["a.#b"]}`,
		`{"types":["a.b#.c"]}`,
		`{"types":[]}`, // empty array
		string(tooMany),
		`{"types":[""]}`,
		`{"types":"order.*"}`,
		`{"types":[1]}`,
		`{"attributes":{"region":[]}}`, // empty value list
		`{"attributes":{"":["x"]}}`,
		`{"attributes":{"region":"eu"}}`,
		`{"attributes":{"region":[1]}}`,
		`{"data":{"a..b":[1]}}`, // empty path segment
		`{"data":{".a":[1]}}`,
		`{"data":{"a.":[1]}}`,
		`{"data":{"":[1]}}`,
		`{"data":{"a":[]}}`,
		`{"data":{"a":[{}]}}`, // objects and arrays are not scalars
		`{"data":{"a":[{"b":1}]}}`,
		`{"data":{"a":[[1]]}}`,
		`{"data":{"a":[1,[]]}}`,
		`{"data":{"a":1}}`,
		`[]`,
		`"types"`,
		`{"types":["a"]`,
	}
	for _, raw := range refused {
		f, err := ParseFilter([]byte(raw))
		require.Error(t, err, "filter %s was accepted as %+v", raw, f)
		var verr *ValidationError
		require.True(t, errors.As(err, &verr), "filter %s: %v is not a ValidationError", raw, err)
		require.True(t, strings.HasPrefix(verr.Field, "filter"), "filter %s: field %q", raw, verr.Field)
	}

	for _, raw := range []string{`null`, `{}`, ``, `  `, `{"attributes":{}}`, `{"data":{}}`} {
		f, err := ParseFilter([]byte(raw))
		require.NoError(t, err, "filter %q", raw)
		require.True(t, f.Empty(), "filter %q", raw)
		require.Nil(t, f.JSON(), "filter %q is stored as NULL", raw)
		require.True(t, f.match(&matchEvent{typ: "any.thing"}))
	}

	for _, raw := range []string{
		string(hundred),
		`{"types":["#","*","a.*.#.b"]}`,
		`{"attributes":{"region":["eu","us"],"tier":["gold"]}}`,
		`{"data":{"a":["x",1,1.5,-2e3,true,false,null],"items.0.sku":["s"]}}`,
	} {
		f, err := ParseFilter([]byte(raw))
		require.NoError(t, err, "filter %s", raw)
		require.False(t, f.Empty())
		// What is stored reads back as the same filter.
		again, err := ParseFilter(f.JSON())
		require.NoError(t, err)
		require.JSONEq(t, string(f.JSON()), string(again.JSON()))
	}
}

// Attribute and data matching: values compare as JSON (numbers by value,
// never with strings), a listed null matches a present null only, paths
// walk objects and arrays, a missing attribute or path never matches, and
// every part of a filter must match.
func TestFilterDataAndAttributeMatching(t *testing.T) {
	t.Parallel()
	cases := []struct {
		filter string
		ev     filterEvent
		want   bool
	}{
		// Numbers by value.
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":1}`}, true},
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":1.0}`}, true},
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":1e0}`}, true},
		{`{"data":{"n":[1.0]}}`, filterEvent{typ: "t", data: `{"n":1}`}, true},
		{`{"data":{"n":[1e0]}}`, filterEvent{typ: "t", data: `{"n":1.00}`}, true},
		{`{"data":{"n":[100]}}`, filterEvent{typ: "t", data: `{"n":1E2}`}, true},
		{`{"data":{"n":[0.1]}}`, filterEvent{typ: "t", data: `{"n":0.10}`}, true},
		{`{"data":{"n":[0]}}`, filterEvent{typ: "t", data: `{"n":-0}`}, true},
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":1.0000000000000000001}`}, false},
		{`{"data":{"n":[12345678901234567890]}}`, filterEvent{typ: "t", data: `{"n":12345678901234567891}`}, false},
		// Strings are not numbers, nor booleans.
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":"1"}`}, false},
		{`{"data":{"n":["1"]}}`, filterEvent{typ: "t", data: `{"n":1}`}, false},
		{`{"data":{"n":["1"]}}`, filterEvent{typ: "t", data: `{"n":"1"}`}, true},
		{`{"data":{"b":[true]}}`, filterEvent{typ: "t", data: `{"b":true}`}, true},
		{`{"data":{"b":[true]}}`, filterEvent{typ: "t", data: `{"b":"true"}`}, false},
		{`{"data":{"b":[false]}}`, filterEvent{typ: "t", data: `{"b":0}`}, false},
		// Null: present null only.
		{`{"data":{"x":[null]}}`, filterEvent{typ: "t", data: `{"x":null}`}, true},
		{`{"data":{"x":[null]}}`, filterEvent{typ: "t", data: `{"y":1}`}, false},
		{`{"data":{"x":[null]}}`, filterEvent{typ: "t"}, false},
		{`{"data":{"x":[null]}}`, filterEvent{typ: "t", data: `null`}, false},
		{`{"data":{"x":[null]}}`, filterEvent{typ: "t", data: `{"x":false}`}, false},
		{`{"data":{"x":["a",null]}}`, filterEvent{typ: "t", data: `{"x":"a"}`}, true},
		// Paths: nested objects and array indexes.
		{`{"data":{"items.0.sku":["s1"]}}`, filterEvent{typ: "t", data: `{"items":[{"sku":"s1"},{"sku":"s2"}]}`}, true},
		{`{"data":{"items.1.sku":["s1"]}}`, filterEvent{typ: "t", data: `{"items":[{"sku":"s1"},{"sku":"s2"}]}`}, false},
		{`{"data":{"items.2.sku":["s1"]}}`, filterEvent{typ: "t", data: `{"items":[{"sku":"s1"}]}`}, false},
		{`{"data":{"0":["a"]}}`, filterEvent{typ: "t", data: `["a"]`}, true},
		{`{"data":{"0":["a"]}}`, filterEvent{typ: "t", data: `{"0":"a"}`}, true},
		{`{"data":{"a.b.c":[1]}}`, filterEvent{typ: "t", data: `{"a":{"b":{"c":1}}}`}, true},
		{`{"data":{"a.b":[1]}}`, filterEvent{typ: "t", data: `{"a":{"b":{"c":1}}}`}, false}, // an object is no scalar
		{`{"data":{"a":[1]}}`, filterEvent{typ: "t", data: `{"a":[1]}`}, false},             // nor an array
		{`{"data":{"a.b":[1]}}`, filterEvent{typ: "t", data: `{"a":"b"}`}, false},
		{`{"data":{"a":[1]}}`, filterEvent{typ: "t", data: `"a"`}, false},
		// Attributes.
		{`{"attributes":{"region":["eu","us"]}}`, filterEvent{typ: "t", attrs: `{"region":"eu"}`}, true},
		{`{"attributes":{"region":["eu","us"]}}`, filterEvent{typ: "t", attrs: `{"region":"ap"}`}, false},
		{`{"attributes":{"region":["eu","us"]}}`, filterEvent{typ: "t", attrs: `{"zone":"eu"}`}, false},
		{`{"attributes":{"region":["eu","us"]}}`, filterEvent{typ: "t"}, false},
		{`{"attributes":{"region":["EU"]}}`, filterEvent{typ: "t", attrs: `{"region":"eu"}`}, false},
		{`{"attributes":{"region":[""]}}`, filterEvent{typ: "t", attrs: `{"region":""}`}, true},
		{`{"attributes":{"region":[""]}}`, filterEvent{typ: "t", attrs: `{}`}, false},
		{`{"attributes":{"a":["1"],"b":["2"]}}`, filterEvent{typ: "t", attrs: `{"a":"1","b":"2","c":"3"}`}, true},
		{`{"attributes":{"a":["1"],"b":["2"]}}`, filterEvent{typ: "t", attrs: `{"a":"1"}`}, false},
		// Every part must match.
		{`{"types":["order.*"],"attributes":{"r":["eu"]},"data":{"n":[1]}}`,
			filterEvent{typ: "order.paid", attrs: `{"r":"eu"}`, data: `{"n":1}`}, true},
		{`{"types":["order.*"],"attributes":{"r":["eu"]},"data":{"n":[1]}}`,
			filterEvent{typ: "user.paid", attrs: `{"r":"eu"}`, data: `{"n":1}`}, false},
		{`{"types":["order.*"],"attributes":{"r":["eu"]},"data":{"n":[1]}}`,
			filterEvent{typ: "order.paid", attrs: `{"r":"us"}`, data: `{"n":1}`}, false},
		{`{"types":["order.*"],"attributes":{"r":["eu"]},"data":{"n":[1]}}`,
			filterEvent{typ: "order.paid", attrs: `{"r":"eu"}`, data: `{"n":2}`}, false},
	}
	for _, c := range cases {
		f := mustParseFilter(t, c.filter)
		require.Equal(t, c.want, f.match(c.ev.match()), "filter %s, event %s", c.filter, c.ev)
	}
}

// sqlMatches evaluates the filter as backfills and seeks do: the types in
// Go (matchType), and sqlMatch for one event given as a row with the
// columns of ferry.events.
func sqlMatches(ctx context.Context, db DBTX, f *Filter, ev filterEvent) (bool, error) {
	if !f.matchType(ev.typ) {
		return false, nil
	}
	nullable := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	var filter *string
	if j := f.JSON(); j != nil {
		filter = nullable(string(j))
	}
	var ok bool
	err := db.QueryRow(ctx, `
		SELECT EXISTS (
			SELECT 1 FROM (VALUES ($2::text, $3::jsonb, $4::jsonb, $5::jsonb, 0::bigint)) e(type, attributes, data, ce, topic_id),
				(SELECT $1::jsonb AS filter) q
			WHERE `+sqlMatch()+`)`,
		filter, ev.typ, nullable(ev.attrs), nullable(ev.data), nullable(ev.ce)).Scan(&ok)
	return ok, err
}

type filterCase struct {
	filter string
	ev     filterEvent
}

// requireGoAndSQLAgree checks, for each case, that the publish path's
// matcher (Go) and the backfill's (SQL) give the same answer.
func requireGoAndSQLAgree(t *testing.T, db DBTX, cases []filterCase) {
	t.Helper()
	ctx := context.Background()
	var filters filterCache
	for _, c := range cases {
		f := mustParseFilter(t, c.filter)
		goSays := f.match(c.ev.match())
		sqlSays, err := sqlMatches(ctx, db, f, c.ev)
		require.NoError(t, err, "filter %s, event %s", c.filter, c.ev)
		// The filter as stored (jsonb text) and read back must agree too.
		var stored *string
		if j := f.JSON(); j != nil {
			require.NoError(t, db.QueryRow(ctx, `SELECT $1::jsonb::text`, string(j)).Scan(&stored))
		}
		storedSays := filters.get(stored).match(c.ev.match())
		// A SQL API publish (ferry.publish) hands the event over as jsonb:
		// its attributes and data reach the publish path's matcher as
		// PostgreSQL writes them (keys sorted, duplicates gone, numbers
		// and strings re-spelled), not as the client wrote them.
		viaSQL := c.ev
		for _, v := range []*string{&viaSQL.attrs, &viaSQL.data} {
			if *v != "" {
				require.NoError(t, db.QueryRow(ctx, `SELECT $1::jsonb::text`, *v).Scan(v))
			}
		}
		if viaSQLSays := f.match(viaSQL.match()); goSays != viaSQLSays {
			t.Errorf("a SQL API publish matches differently: filter %s, event %s: REST %v, SQL API %v", c.filter, c.ev, goSays, viaSQLSays)
		}
		if goSays != sqlSays {
			t.Errorf("Go and SQL disagree: filter %s, event %s: Go %v, SQL %v", c.filter, c.ev, goSays, sqlSays)
		}
		if goSays != storedSays {
			t.Errorf("the stored filter disagrees: filter %s, event %s: Go %v, stored %v", c.filter, c.ev, goSays, storedSays)
		}
	}
}

// A publish matches in Go, a backfill or seek in SQL: both must select the
// same events, or a subscription's content would depend on how an event
// reached it.
func TestFilterGoAndSQLAgree(t *testing.T) {
	t.Parallel()
	tx := pgtest.NewTx(t)
	items := `{"items":[{"sku":"s1","qty":2},{"sku":"s2","qty":1.0}],"n":1,"s":"1","b":true,"z":null,"o":{"k":"v"}}`
	requireGoAndSQLAgree(t, tx, []filterCase{
		{`null`, filterEvent{typ: "a"}},
		{`{"types":["order.*"]}`, filterEvent{typ: "order.created"}},
		{`{"types":["order.*"]}`, filterEvent{typ: "order"}},
		{`{"types":["order.*"]}`, filterEvent{typ: "orders.created"}},
		{`{"types":["order.*"]}`, filterEvent{typ: "order.item.added"}},
		{`{"types":["order.#"]}`, filterEvent{typ: "order"}},
		{`{"types":["order.#"]}`, filterEvent{typ: "order.a.b"}},
		{`{"types":["order.#"]}`, filterEvent{typ: "orders"}},
		{`{"types":["#"]}`, filterEvent{typ: "x.y.z"}},
		{`{"types":["#.created"]}`, filterEvent{typ: "created"}},
		{`{"types":["#.created"]}`, filterEvent{typ: "a.b.created"}},
		{`{"types":["#.created"]}`, filterEvent{typ: "a.created.x"}},
		{`{"types":["*"]}`, filterEvent{typ: "a.b"}},
		{`{"types":["a.*.c"]}`, filterEvent{typ: "a.b.c"}},
		{`{"types":["a+b.(c)"]}`, filterEvent{typ: "a+b.(c)"}},
		{`{"types":["a+b.(c)"]}`, filterEvent{typ: "aab.c"}},
		{`{"types":["a\\b.[x]{2}.^$|?"]}`, filterEvent{typ: "a\\b.[x]{2}.^$|?"}},
		{`{"types":["a\\b.[x]{2}.^$|?"]}`, filterEvent{typ: "ab.xx.x"}},
		{`{"types":["é.*"]}`, filterEvent{typ: "é.ü"}},
		{`{"types":["x","#.deleted"]}`, filterEvent{typ: "user.deleted"}},
		{`{"attributes":{"region":["eu","us"]}}`, filterEvent{typ: "t", attrs: `{"region":"us","x":"y"}`}},
		{`{"attributes":{"region":["eu","us"]}}`, filterEvent{typ: "t", attrs: `{"region":"ap"}`}},
		{`{"attributes":{"region":["eu"]}}`, filterEvent{typ: "t"}},
		{`{"attributes":{"region":[""]}}`, filterEvent{typ: "t", attrs: `{"region":""}`}},
		{`{"attributes":{"a":["1"],"b":["2"]}}`, filterEvent{typ: "t", attrs: `{"a":"1"}`}},
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":1.0}`}},
		{`{"data":{"n":[1.0]}}`, filterEvent{typ: "t", data: `{"n":1e0}`}},
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":"1"}`}},
		{`{"data":{"s":[1]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"s":["1"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"b":[true]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"b":["true"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"z":[null]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"missing":[null]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"z":[null]}}`, filterEvent{typ: "t"}},
		{`{"data":{"z":[null]}}`, filterEvent{typ: "t", data: `null`}},
		{`{"data":{"items.0.sku":["s1"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"items.1.qty":[1]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"items.2.sku":["s1"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"items.x":["s1"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"items":[1]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"o":["v"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"o.k":["v"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"o.k.x":["v"]}}`, filterEvent{typ: "t", data: items}},
		{`{"data":{"0":["a"]}}`, filterEvent{typ: "t", data: `["a"]`}},
		{`{"data":{"0":["a"]}}`, filterEvent{typ: "t", data: `{"0":"a"}`}},
		{`{"data":{"n":[1]}}`, filterEvent{typ: "t", data: `{"n":1,"n":2}`}}, // last duplicate wins, in both
		{`{"data":{"n":[100]}}`, filterEvent{typ: "t", data: `{"n":1e2}`}},
		{`{"data":{"n":[0.1]}}`, filterEvent{typ: "t", data: `{"n":1.0E-1}`}},
		{`{"data":{"n":[-0]}}`, filterEvent{typ: "t", data: `{"n":0}`}},
		{`{"data":{"s":["é"]}}`, filterEvent{typ: "t", data: `{"s":"\u00e9"}`}},
		{`{"data":{"s":["a/b"]}}`, filterEvent{typ: "t", data: `{"s":"a\/b"}`}},
		{`{"attributes":{"k":["\"q\""]}}`, filterEvent{typ: "t", attrs: `{"k":"\"q\""}`}},
		{`{"data":{"big":[12345678901234567890]}}`, filterEvent{typ: "t", data: `{"big":12345678901234567890}`}},
		{`{"data":{"big":[12345678901234567891]}}`, filterEvent{typ: "t", data: `{"big":12345678901234567890}`}},
		{`{"types":["order.*"],"attributes":{"r":["eu"]},"data":{"n":[1],"b":[true]}}`,
			filterEvent{typ: "order.paid", attrs: `{"r":"eu"}`, data: `{"n":1.0,"b":true}`}},
		{`{"types":["order.*"],"attributes":{"r":["eu"]},"data":{"n":[1],"b":[true]}}`,
			filterEvent{typ: "order.paid", attrs: `{"r":"eu"}`, data: `{"n":1.0,"b":false}`}},
	})
}

// Array indexes in data paths: the contract has them "written as numbers"
// (items.0.sku), and the Go matcher (matchEvent.at) takes only the
// canonical spelling of a non-negative index, while PostgreSQL's #> reads
// a path element with strtol: "-1" is the last element, "01", "+1" and
// " 1" are index 1. A path spelled so must be refused by ParseFilter, or
// match alike in Go and SQL; else a backfill or seek (sqlMatch) delivers
// events that a publish of the same event does not.
func TestFilterGoAndSQLAgreeOnArrayIndexSpelling(t *testing.T) {
	t.Parallel()
	tx := pgtest.NewTx(t)
	data := `{"items":["a","x"],"o":{"-1":"x","01":"x"}}`
	var agree []filterCase
	for _, raw := range []string{
		`{"data":{"items.1":["x"]}}`, // canonical: both match
		`{"data":{"items.-1":["x"]}}`,
		`{"data":{"items.01":["x"]}}`,
		`{"data":{"items.+1":["x"]}}`,
		`{"data":{"items. 1":["x"]}}`,
		`{"data":{"items.1 ":["x"]}}`,
		`{"data":{"items.-0":["a"]}}`,
		`{"data":{"o.-1":["x"]}}`, // object keys that look like indexes
		`{"data":{"o.01":["x"]}}`,
	} {
		if _, err := ParseFilter([]byte(raw)); err != nil {
			var verr *ValidationError
			require.True(t, errors.As(err, &verr), "filter %s: %v", raw, err)
			continue
		}
		agree = append(agree, filterCase{raw, filterEvent{typ: "t", data: data}})
	}
	require.NotEmpty(t, agree)
	requireGoAndSQLAgree(t, tx, agree)
}

// A filter ParseFilter accepts must be storable: attribute values and data
// strings are not checked for NUL, which PostgreSQL's jsonb refuses
// ("unsupported Unicode escape sequence"), so SubscriptionUpsert fails
// with an internal error instead of a ValidationError (a 500, not a 400).
// Event attributes and data with NUL are refused at publish for the same
// reason (handlers: safeText, and jsonCheck.escape for \u0000).
func TestParseFilterRefusesUnstorableValues(t *testing.T) {
	t.Parallel()
	tx := pgtest.NewTx(t)
	ctx := context.Background()
	tp, _, err := TopicUpsert(ctx, tx, t.Name()+".nul", TopicPatch{})
	require.NoError(t, err)
	for i, raw := range []string{
		`{"attributes":{"region":["e\u0000u"]}}`,
		`{"data":{"name":["\u0000"]}}`,
	} {
		f, err := ParseFilter([]byte(raw))
		if err != nil {
			var verr *ValidationError
			require.True(t, errors.As(err, &verr), "filter %s: %v", raw, err)
			continue
		}
		_, _, _, err = SubscriptionUpsert(ctx, tx, tp, fmt.Sprintf("s%d", i), SubscriptionPatch{Filter: f})
		if err != nil {
			t.Errorf("filter %s passed ParseFilter but cannot be stored: %v", raw, err)
		}
	}
}

// TestStoredFilterBeforeLimits: a filter saved before a limit existed (9
// "#" in one pattern, over maxFilterHashes) is refused from clients now,
// but a subscription that has it keeps matching what it matched, and its
// stored form reads back unchanged (a later PUT must not turn it into
// something else).
func TestStoredFilterBeforeLimits(t *testing.T) {
	t.Parallel()
	pattern := strings.Repeat("#.a.", 8) + "#.a"
	stored := `{"types":["` + pattern + `","x.*"]}`
	_, err := ParseFilter([]byte(stored))
	var verr *ValidationError
	require.ErrorAs(t, err, &verr, "clients can no longer save it")

	f := new(filterCache).get(&stored)
	nine := strings.Repeat("a.", 8) + "a"
	require.True(t, f.matchType(nine), "%s matches %s", pattern, nine)
	require.True(t, f.matchType("z."+strings.ReplaceAll(nine, ".", ".q.")))
	require.False(t, f.matchType(strings.Repeat("a.", 7)+"a"), "eight a's are too few")
	require.True(t, f.matchType("x.y"))
	require.False(t, f.matchType("b"))
	require.JSONEq(t, stored, string(f.JSON()))
}

// Sources and subjects: "*" matches any run of characters, everything
// else itself (LIKE's % and _ and the escape \ included), in Go as in SQL.
func TestFilterGoAndSQLAgreeOnSourcesAndSubjects(t *testing.T) {
	t.Parallel()
	db := pgtest.NewTx(t)
	ce := func(source, subject string) filterEvent {
		a := CloudAttrs{Source: source}
		if subject != "" {
			a.Subject = &subject
		}
		b, _ := json.Marshal(a)
		return filterEvent{typ: "t", ce: string(b)}
	}
	var cases []filterCase
	events := []filterEvent{ce("https://a.example/x", "orders/1"), ce("urn:a%b_c", ""), ce(`back\slash`, "s*"), ce("", "x")}
	for _, f := range []string{`{"sources": ["https://*"]}`, `{"sources": ["*"]}`, `{"sources": ["urn:a%b_c"]}`,
		`{"sources": ["urn:a_b%c", "urn:a*"]}`, `{"sources": ["back\\*"]}`, `{"subjects": ["orders/*"]}`,
		`{"subjects": ["*"]}`, `{"subjects": ["s\\*", "x"]}`, `{"sources": ["*x*"], "subjects": ["*1"]}`} {
		for _, e := range events {
			cases = append(cases, filterCase{f, e})
		}
	}
	requireGoAndSQLAgree(t, db, cases)
	for p, ok := range map[string]bool{"a*c": true, "a*b*c": true, "*": true, "abc": true, "a*d": false, "**c": true, "ab": false} {
		require.Equal(t, ok, globMatch(p, "abc"), "pattern %q", p)
	}
}
