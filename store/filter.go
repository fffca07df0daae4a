package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Filter selects the events a subscription receives. Every part given
// must match; an empty filter matches every event.
//
//   - Types are patterns over dot-separated words, case-sensitive: "*"
//     matches exactly one word and "#" zero or more; other words match
//     themselves ("order.*" matches "order.created", not "order",
//     "orders.created" nor "order.item.added"). An event matches if its
//     type matches any pattern.
//   - Attributes: the event's attribute must be one of the listed values.
//   - Data: the value at a dotted path in the event's data (object keys,
//     or array indexes) must equal one of the listed JSON scalars.
//   - Sources and Subjects: the event's CloudEvents source (subject) must
//     match one of the listed patterns, where "*" matches any run of
//     characters (see globMatch); an event without a subject matches no
//     Subjects.
//
// A publish matches in Go (match). A backfill or seek matches types in Go
// too, with the same typeMatcher (matchType), and attributes and data in
// SQL (sqlMatch). Type patterns are never regular expressions: those cost
// Go's NFA and PostgreSQL's engine work that grows with the patterns'
// wildcards (see typeMatcher).
type Filter struct {
	Types      []string            `json:"types,omitempty"`
	Attributes map[string][]string `json:"attributes,omitempty"`
	Data       map[string][]any    `json:"data,omitempty"`
	Sources    []string            `json:"sources,omitempty"`
	Subjects   []string            `json:"subjects,omitempty"`

	types *typeMatcher
	paths map[string][]string
}

// Limits of a filter, part of the contract (openapi.yaml). The last three
// bound the work of matching one event (a publish's fan-out matches every
// event against every subscription's filter) far above what a filter
// written by hand needs.
const (
	maxFilterTypes  = 100
	maxFilterKeys   = 50
	maxFilterValues = 100
	maxFilterText   = 256
	// maxFilterHashes bounds the "#" wildcards of one type pattern (a
	// run such as #.# is one).
	maxFilterHashes = 8
	// maxFilterTypesBytes bounds the type patterns together.
	maxFilterTypesBytes = 8192
	// maxFilterBytes bounds the whole filter as stored (its JSON).
	maxFilterBytes = 64 << 10
)

// parseStoredFilter reads a filter as ParseFilter saved it, without
// checking it against today's limits: a filter saved before a limit was
// added (e.g. more "#" per pattern than maxFilterHashes) keeps meaning what
// it meant when it was accepted.
func parseStoredFilter(raw []byte) (*Filter, error) {
	f := &Filter{}
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return f, f.compile()
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(f); err != nil {
		return nil, err
	}
	return f, f.compile()
}

// ParseFilter decodes and validates a filter given by a client (JSON
// object with optional members types, attributes and data; numbers in
// data kept exact). A nil or empty document is the empty filter.
func ParseFilter(raw []byte) (*Filter, error) {
	f := &Filter{}
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return f, f.compile()
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(f); err != nil {
		return nil, &ValidationError{Field: "filter", Message: "must be an object with types, attributes, data, sources and subjects: " + jsonProblem(err)}
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	if n := len(f.JSON()); n > maxFilterBytes {
		return nil, &ValidationError{Field: "filter", Message: fmt.Sprintf("must be at most %d bytes as JSON, not %d", maxFilterBytes, n)}
	}
	return f, f.compile()
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return te.Field + " has the wrong type"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func (f *Filter) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ValidationError{Field: "filter." + field, Message: fmt.Sprintf(format, args...)}
	}
	if err := validateTypes(f.Types, bad); err != nil {
		return err
	}
	if err := validateGlobs("sources", f.Sources); err != nil {
		return err
	}
	if err := validateGlobs("subjects", f.Subjects); err != nil {
		return err
	}
	if len(f.Attributes) > maxFilterKeys {
		return bad("attributes", "must hold at most %d keys", maxFilterKeys)
	}
	for k, vs := range f.Attributes {
		if k == "" || len(k) > maxFilterText || !validText(k) {
			return bad("attributes", "keys must be 1-%d bytes of text", maxFilterText)
		}
		if len(vs) == 0 || len(vs) > maxFilterValues {
			return bad("attributes."+k, "must list 1-%d values", maxFilterValues)
		}
		for _, v := range vs {
			if len(v) > 4096 || !validText(v) {
				return bad("attributes."+k, "values must be at most 4096 bytes of text")
			}
		}
	}
	if len(f.Data) > maxFilterKeys {
		return bad("data", "must hold at most %d paths", maxFilterKeys)
	}
	for p, vs := range f.Data {
		if p == "" || len(p) > maxFilterText || !validText(p) || slicesContains(strings.Split(p, "."), "") {
			return bad("data", "paths must be 1-%d bytes of dot-separated, non-empty keys", maxFilterText)
		}
		for _, seg := range strings.Split(p, ".") {
			if ambiguousIndex(seg) {
				return bad("data", "path segment %q: array indexes are written without sign, spaces or leading zeros", seg)
			}
		}
		if len(vs) == 0 || len(vs) > maxFilterValues {
			return bad("data."+p, "must list 1-%d values", maxFilterValues)
		}
		for _, v := range vs {
			switch v := v.(type) {
			case bool, nil:
			case string:
				if len(v) > 4096 || !validText(v) {
					return bad("data."+p, "string values must be at most 4096 bytes of text")
				}
			case json.Number:
				if _, err := strconv.ParseFloat(string(v), 64); err != nil {
					return bad("data."+p, "numbers must be within the range of a 64-bit float")
				}
			default:
				return bad("data."+p, "values must be strings, numbers, booleans or null")
			}
		}
	}
	return nil
}

// validateTypes checks the type patterns (see Filter.validate).
func validateTypes(types []string, bad func(field, format string, args ...any) error) error {
	if types != nil && (len(types) == 0 || len(types) > maxFilterTypes) {
		return bad("types", "must hold 1-%d patterns", maxFilterTypes)
	}
	total := 0
	for i, p := range types {
		if p == "" || len(p) > maxFilterText || !validText(p) {
			return bad(fmt.Sprintf("types[%d]", i), "must be 1-%d bytes of text", maxFilterText)
		}
		hashes, prev := 0, ""
		for _, w := range strings.Split(p, ".") {
			if w != "*" && w != "#" && strings.ContainsAny(w, "*#") {
				return bad(fmt.Sprintf("types[%d]", i), "* and # must be whole words (as in order.* or #.created)")
			}
			if w == "#" && prev != "#" {
				hashes++
			}
			prev = w
		}
		if hashes > maxFilterHashes {
			return bad(fmt.Sprintf("types[%d]", i), "may hold at most %d # wildcards (a run such as #.# counts once), not %d", maxFilterHashes, hashes)
		}
		total += len(p)
	}
	if total > maxFilterTypesBytes {
		return bad("types", "must be at most %d bytes together, not %d", maxFilterTypesBytes, total)
	}
	return nil
}

// validateGlobs checks the patterns of sources or subjects (field): 1-100
// of 1-256 bytes of text, when given.
func validateGlobs(field string, ps []string) error {
	if ps != nil && (len(ps) == 0 || len(ps) > maxFilterValues) {
		return &ValidationError{Field: "filter." + field, Message: fmt.Sprintf("must hold 1-%d patterns", maxFilterValues)}
	}
	for i, p := range ps {
		if p == "" || len(p) > maxFilterText || !validText(p) {
			return &ValidationError{Field: fmt.Sprintf("filter.%s[%d]", field, i), Message: fmt.Sprintf("must be 1-%d bytes of text", maxFilterText)}
		}
	}
	return nil
}

// ambiguousIndex reports whether a path segment is an integer written in a
// form PostgreSQL's #> reads as an array index but Go's matcher would not
// ("-1" counts from the end there, "01" and " 1" are 1): such paths would
// match differently on publish and on backfill, so they are refused.
func ambiguousIndex(seg string) bool {
	t := strings.TrimSpace(seg)
	t = strings.TrimLeft(t, "+-")
	if t == "" || strings.Trim(t, "0123456789") != "" {
		return false // not an integer: an object key
	}
	canonical := t == "0" || t[0] != '0'
	return !canonical || t != seg
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// validText: valid UTF-8 without NUL (PostgreSQL text cannot hold NUL).
func validText(s string) bool {
	return !strings.ContainsRune(s, 0) && strings.ToValidUTF8(s, "\uFFFD") == s
}

func (f *Filter) compile() error {
	if len(f.Types) > 0 {
		f.types = newTypeMatcher(f.Types)
	}
	f.paths = make(map[string][]string, len(f.Data))
	for p := range f.Data {
		f.paths[p] = strings.Split(p, ".")
	}
	return nil
}

// matchType reports whether the filter's type patterns select typ (true
// when it has none).
func (f *Filter) matchType(typ string) bool {
	return f.types == nil || f.types.match(typ)
}

// Empty reports whether the filter matches every event.
func (f *Filter) Empty() bool {
	return len(f.Types) == 0 && len(f.Attributes) == 0 && len(f.Data) == 0 && len(f.Sources) == 0 && len(f.Subjects) == 0
}

// JSON is the filter as stored and shown: null when empty.
func (f *Filter) JSON() []byte {
	if f == nil || f.Empty() {
		return nil
	}
	b, _ := json.Marshal(f)
	return b
}

// Match reports whether the filter selects the event. data is parsed
// lazily by the caller-provided cache (see matchEvent).
func (f *Filter) match(e *matchEvent) bool {
	if !f.matchType(e.typ) {
		return false
	}
	if f.Sources != nil && !globAny(f.Sources, e.cloud().Source) {
		return false
	}
	if f.Subjects != nil && (e.cloud().Subject == nil || !globAny(f.Subjects, *e.cloud().Subject)) {
		return false
	}
	for k, vs := range f.Attributes {
		v, ok := e.attrs()[k]
		if !ok || !slicesContains(vs, v) {
			return false
		}
	}
	for p, vs := range f.Data {
		v, ok := e.at(f.paths[p])
		if !ok {
			return false
		}
		found := false
		for _, want := range vs {
			if jsonScalarEqual(v, want) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// matchEvent is an event being matched against many filters; its
// attributes and data are decoded once, when a filter first needs them.
type matchEvent struct {
	typ      string
	rawCE    *string // the event's ce (nil: a plain JSON event)
	source   string  // its topic's CloudSource, for a plain JSON event
	ce       *CloudAttrs
	rawAttrs json.RawMessage
	rawData  json.RawMessage
	attrMap  map[string]string
	data     any
	decoded  bool
}

// cloud is the event's CloudEvents attributes: as stored, or the
// defaults of a plain JSON event (only the source matters here).
func (e *matchEvent) cloud() *CloudAttrs {
	if e.ce == nil {
		e.ce = &CloudAttrs{}
		if e.rawCE == nil || json.Unmarshal([]byte(*e.rawCE), e.ce) != nil {
			e.ce = &CloudAttrs{Source: e.source}
		}
	}
	return e.ce
}

// globAny reports whether s matches one of the patterns (globMatch).
func globAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if globMatch(p, s) {
			return true
		}
	}
	return false
}

// globMatch reports whether s matches pattern, where "*" matches any run
// of characters (none included) and every other character itself, as
// LIKE does with the pattern globLikeSQL makes of it. It backtracks only
// to the last "*", so it takes at most len(pattern)*len(s) steps.
func globMatch(pattern, s string) bool {
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p, mark = star+1, mark+1
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func (e *matchEvent) attrs() map[string]string {
	if e.attrMap == nil {
		e.attrMap = map[string]string{}
		if len(e.rawAttrs) > 0 {
			_ = json.Unmarshal(e.rawAttrs, &e.attrMap)
		}
	}
	return e.attrMap
}

// at returns the value at path in the event's data.
func (e *matchEvent) at(path []string) (any, bool) {
	if !e.decoded {
		e.decoded = true
		if len(e.rawData) > 0 {
			dec := json.NewDecoder(bytes.NewReader(e.rawData))
			dec.UseNumber()
			_ = dec.Decode(&e.data)
		}
	}
	cur := e.data
	if cur == nil {
		return nil, false
	}
	for _, k := range path {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[k]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != k {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// jsonScalarEqual compares a decoded JSON value with a filter's scalar as
// PostgreSQL's jsonb does: numbers by value, strings and booleans exactly,
// null only with null.
func jsonScalarEqual(v, want any) bool {
	switch w := want.(type) {
	case nil:
		return v == nil
	case string:
		s, ok := v.(string)
		return ok && s == w
	case bool:
		b, ok := v.(bool)
		return ok && b == w
	case json.Number:
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		a, okA := new(big.Rat).SetString(string(n))
		b, okB := new(big.Rat).SetString(string(w))
		return okA && okB && a.Cmp(b) == 0
	}
	return false
}

// sqlMatch is the SQL condition equal to Filter.match but for types
// (matchType), for the event row e and the subscription row q (column
// filter). Used by backfill and seek.
func sqlMatch() string {
	return `(q.filter->'sources' IS NULL OR EXISTS (
			SELECT 1 FROM jsonb_array_elements_text(q.filter->'sources') s(p)
			WHERE coalesce(e.ce->>'source', (SELECT coalesce(t.source, '/ferry/topics/' || t.name) FROM ferry.topics t WHERE t.id = e.topic_id))
				LIKE ` + globLikeSQL("s.p") + `))
		AND (q.filter->'subjects' IS NULL OR EXISTS (
			SELECT 1 FROM jsonb_array_elements_text(q.filter->'subjects') s(p)
			WHERE e.ce->>'subject' LIKE ` + globLikeSQL("s.p") + `))
		AND NOT EXISTS (
			SELECT 1 FROM jsonb_each(coalesce(q.filter->'attributes', '{}')) a(k, vals)
			WHERE NOT coalesce(a.vals @> to_jsonb(e.attributes->>a.k), false))
		AND NOT EXISTS (
			SELECT 1 FROM jsonb_each(coalesce(q.filter->'data', '{}')) d(p, vals)
			WHERE NOT coalesce(d.vals @> jsonb_build_array(e.data #> string_to_array(d.p, '.')), false)
				OR (e.data #> string_to_array(d.p, '.')) IS NULL)`
}

// globLikeSQL is the LIKE pattern (escape \) of the glob pattern p:
// \, % and _ escaped, * as %.
func globLikeSQL(p string) string {
	return `replace(replace(replace(replace(` + p + `, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')`
}

// storedFilter returns the parsed form of a stored filter (nil: empty).
func storedFilter(stored *string) *Filter {
	if stored == nil {
		return &Filter{}
	}
	f, err := parseStoredFilter([]byte(*stored))
	if err != nil {
		// A stored filter was validated when it was saved; one that can
		// no longer be read matches nothing rather than everything.
		f = &Filter{Types: []string{"#"}, types: newTypeMatcher(nil)}
	}
	return f
}
