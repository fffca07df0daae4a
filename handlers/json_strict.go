package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// The strict pass. encoding/json matches member names case-insensitively,
// keeps the last of duplicate members and hands free-form values
// (json.RawMessage) through unexamined. Before it decodes a request body,
// checkJSON walks the body once, byte by byte, against the Go type it will
// be decoded into, and refuses:
//
//   - a member name that is not exactly a field's JSON name (case
//     matters), wherever a struct is expected;
//   - a duplicate member, in any object, free-form values included
//     (names compared after unescaping: "a" and "\u0061" are the same);
//   - a number PostgreSQL's numeric (hence jsonb) cannot store, anywhere;
//   - a string or name holding \u0000 or an unpaired surrogate escape,
//     anywhere: jsonb refuses both, so bodies (stored as json), event data
//     (jsonb) and attributes are held to the same rule;
//   - a free-form value (a message's body, an event's data) nesting
//     deeper than MaxValueDepth.
//
// Anything else it does not like (malformed JSON, nesting deeper than
// encoding/json allows) is errSyntax: the decoder then reports it in its own
// words.

// maxJSONDepth is encoding/json's nesting limit, in any document it
// reads, and in a json.RawMessage it writes.
const maxJSONDepth = 10000

// MaxValueDepth is the deepest a message's body or an event's data may
// nest, levels counted as encoding/json counts them ([] and {} are one, a
// scalar none). Whatever Ferry accepts, every answer that carries it must
// be able to encode it, and every client using encoding/json to read it:
// the deepest answer, a subscription's receive or dead letters, holds an
// event's data four levels down ({"messages":[{"event":{"data": ...}}]}),
// so 10000 - 4. The SQL API applies the same value (ferry.max_value_depth,
// migration 000011).
const MaxValueDepth = maxJSONDepth - 4

// errSyntax marks input the strict pass leaves to encoding/json to report.
var errSyntax = errors.New("handlers: malformed JSON")

// rawOf is a JSON value kept raw to be decoded later into T (e.g. push,
// whose null and absence mean different things): the strict pass checks it
// as a T.
type rawOf[T any] json.RawMessage

// UnmarshalJSON keeps a copy of the raw value, null included.
func (r *rawOf[T]) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

func (rawOf[T]) strictShape() reflect.Type { return reflect.TypeFor[T]() }

type shaper interface{ strictShape() reflect.Type }

// jsonCheck is one walk over a document.
type jsonCheck struct {
	b      []byte
	i      int
	depth  int
	path   []pathSeg
	fields map[reflect.Type][]field // structs met, by type
	// free is the free-form value being walked: its depth and path length
	// where it began (depth -1: none).
	free struct{ depth, path int }
}

// field is a struct field as encoding/json names it.
type field struct {
	name string
	typ  reflect.Type
}

// pathSeg is one step into the document: a member name, or an index.
type pathSeg struct {
	key   []byte
	index int // -1: key
}

// checkJSON runs the strict pass over b, a document to be decoded into a
// value of type t (nil: free-form). It returns nil, errSyntax or a *Problem.
func checkJSON(b []byte, t reflect.Type, prefix string) error {
	w := &jsonCheck{b: b}
	w.free.depth = -1
	if prefix != "" {
		w.path = append(w.path, pathSeg{key: []byte(prefix), index: -1})
	}
	if err := w.value(t); err != nil {
		return err
	}
	w.ws()
	if w.i != len(w.b) {
		return errSyntax
	}
	return nil
}

// shapeOf is what the walk needs of t: nil for free-form values (and for
// types that decode themselves), else t without pointers.
func shapeOf(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == nil:
		return nil
	case t.Implements(reflect.TypeFor[shaper]()):
		return shapeOf(reflect.Zero(t).Interface().(shaper).strictShape())
	case t.Kind() == reflect.Interface, reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()):
		return nil
	}
	return t
}

func (w *jsonCheck) ws() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

func (w *jsonCheck) peek() byte {
	if w.i < len(w.b) {
		return w.b[w.i]
	}
	return 0
}

func (w *jsonCheck) value(t reflect.Type) error {
	w.ws()
	if w.free.depth < 0 && shapeOf(t) == nil {
		w.free.depth, w.free.path = w.depth, len(w.path)
		defer func() { w.free.depth = -1 }()
	}
	switch c := w.peek(); {
	case c == '{':
		return w.object(shapeOf(t))
	case c == '[':
		return w.array(shapeOf(t))
	case c == '"':
		_, err := w.str(false)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return w.number()
	case c == 't':
		return w.literal("true")
	case c == 'f':
		return w.literal("false")
	case c == 'n':
		return w.literal("null")
	}
	return errSyntax
}

func (w *jsonCheck) literal(s string) error {
	if !bytes.HasPrefix(w.b[w.i:], []byte(s)) {
		return errSyntax
	}
	w.i += len(s)
	return nil
}

func (w *jsonCheck) enter() error {
	w.depth++
	if w.free.depth >= 0 && w.depth-w.free.depth > MaxValueDepth {
		return invalid(pathString(w.path[:w.free.path], ""), "must not nest deeper than %d levels", MaxValueDepth)
	}
	if w.depth > maxJSONDepth {
		return errSyntax
	}
	w.i++
	return nil
}

func (w *jsonCheck) array(t reflect.Type) error {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	if err := w.enter(); err != nil {
		return err
	}
	if w.ws(); w.peek() == ']' {
		w.i++
		w.depth--
		return nil
	}
	for n := 0; ; n++ {
		w.path = append(w.path, pathSeg{index: n})
		if err := w.value(elem); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
		w.ws()
		switch w.peek() {
		case ',':
			w.i++
		case ']':
			w.i++
			w.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

// object walks an object; t is a struct (exact member names), a map (any
// names, values of its element type) or nil (free-form).
func (w *jsonCheck) object(t reflect.Type) error {
	var fields, elem reflect.Type
	switch {
	case t == nil:
	case t.Kind() == reflect.Struct:
		fields = t
	case t.Kind() == reflect.Map:
		elem = t.Elem()
	}
	if err := w.enter(); err != nil {
		return err
	}
	if w.ws(); w.peek() == '}' {
		w.i++
		w.depth--
		return nil
	}
	var names memberSet
	for {
		if w.ws(); w.peek() != '"' {
			return errSyntax
		}
		key, err := w.str(true)
		if err != nil {
			return err
		}
		if !names.add(key) {
			return w.fail("has the member %q more than once", key)
		}
		vt := elem
		if fields != nil {
			ft, ok := w.field(fields, key)
			if !ok {
				return invalid(w.at(string(key)), "unknown field (member names are case-sensitive)")
			}
			vt = ft
		}
		if w.ws(); w.peek() != ':' {
			return errSyntax
		}
		w.i++
		w.path = append(w.path, pathSeg{key: key, index: -1})
		if err := w.value(vt); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
		w.ws()
		switch w.peek() {
		case ',':
			w.i++
		case '}':
			w.i++
			w.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

// memberSet holds an object's member names: in place while few, in a map
// beyond.
type memberSet struct {
	few [8][]byte
	n   int
	set map[string]struct{}
}

func (s *memberSet) add(k []byte) bool {
	if s.set == nil {
		for _, n := range s.few[:s.n] {
			if bytes.Equal(n, k) {
				return false
			}
		}
		if s.n < len(s.few) {
			s.few[s.n] = k
			s.n++
			return true
		}
		s.set = make(map[string]struct{}, 2*len(s.few))
		for _, n := range s.few {
			s.set[string(n)] = struct{}{}
		}
	}
	if _, ok := s.set[string(k)]; ok {
		return false
	}
	s.set[string(k)] = struct{}{}
	return true
}

// field finds the field of struct t whose JSON name is exactly key.
func (w *jsonCheck) field(t reflect.Type, key []byte) (reflect.Type, bool) {
	fs, ok := w.fields[t]
	if !ok {
		if w.fields == nil {
			w.fields = map[reflect.Type][]field{}
		}
		fs = appendFields(nil, t)
		w.fields[t] = fs
	}
	for _, f := range fs {
		if f.name == string(key) {
			return f.typ, true
		}
	}
	return nil, false
}

// appendFields appends t's fields as encoding/json names them: the tag's
// name, else the Go name; exported fields only, "-" skipped, and the fields
// of embedded structs without a name promoted.
func appendFields(fs []field, t reflect.Type) []field {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				fs = appendFields(fs, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs = append(fs, field{name: name, typ: f.Type})
	}
	return fs
}

// str walks a string, refusing what jsonb cannot hold; with want, it also
// returns the string's value (for member names).
func (w *jsonCheck) str(want bool) ([]byte, error) {
	start := w.i
	w.i++
	escaped := false
	for w.i < len(w.b) {
		c := w.b[w.i]
		switch {
		case c == '"':
			w.i++
			if !want {
				return nil, nil
			}
			if !escaped {
				return w.b[start+1 : w.i-1], nil
			}
			var s string
			if err := json.Unmarshal(w.b[start:w.i], &s); err != nil {
				return nil, errSyntax
			}
			return []byte(s), nil
		case c < 0x20:
			return nil, errSyntax
		case c == '\\':
			escaped = true
			if err := w.escape(); err != nil {
				return nil, err
			}
		default:
			w.i++
		}
	}
	return nil, errSyntax
}

// escape walks one escape sequence at w.i (the backslash).
func (w *jsonCheck) escape() error {
	if w.i+1 >= len(w.b) {
		return errSyntax
	}
	if c := w.b[w.i+1]; c != 'u' {
		if !strings.ContainsRune(`"\/bfnrt`, rune(c)) {
			return errSyntax
		}
		w.i += 2
		return nil
	}
	r, ok := w.hex4(w.i + 2)
	if !ok {
		return errSyntax
	}
	w.i += 6
	switch {
	case r == 0:
		return w.fail(`must not contain the escape \u0000 (PostgreSQL cannot store it in JSON)`)
	case r >= 0xDC00 && r <= 0xDFFF:
		return w.fail(`must not contain an unpaired surrogate escape (\u%04x)`, r)
	case r >= 0xD800 && r <= 0xDBFF:
		if w.i+1 < len(w.b) && w.b[w.i] == '\\' && w.b[w.i+1] == 'u' {
			if lo, ok := w.hex4(w.i + 2); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				w.i += 6
				return nil
			}
		}
		return w.fail(`must not contain an unpaired surrogate escape (\u%04x)`, r)
	}
	return nil
}

func (w *jsonCheck) hex4(at int) (rune, bool) {
	if at+4 > len(w.b) {
		return 0, false
	}
	var r rune
	for _, c := range w.b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number walks a number and checks that PostgreSQL can store it.
func (w *jsonCheck) number() error {
	n, end, ok := scanNumber(w.b, w.i)
	if !ok {
		return errSyntax
	}
	start := w.i
	w.i = end
	if !n.fits() {
		return w.fail("holds the number %s, which PostgreSQL cannot store (at most 131072 digits before the decimal point and 16383 after)",
			abbreviate(string(w.b[start:end])))
	}
	return nil
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

// fail is a problem at the walk's current place.
func (w *jsonCheck) fail(format string, args ...any) *Problem {
	return invalid(w.at(""), format, args...)
}

// at names the current place as a field path (messages[0].body.a), with
// key appended when given.
func (w *jsonCheck) at(key string) string { return pathString(w.path, key) }

// pathString names path as a field path, with key appended when given;
// "body" when both are empty.
func pathString(path []pathSeg, key string) string {
	var b strings.Builder
	for _, s := range path {
		if s.index >= 0 {
			fmt.Fprintf(&b, "[%d]", s.index)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(s.key)
	}
	if key != "" {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(key)
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}
