package handlers

import (
	"bytes"
	"encoding/json"
	"io"
	"math/big"
	"reflect"
	"regexp"
	"strings"
)

// Oracles for the fuzz targets (fuzz_internal_test.go): what the strict
// pass, the numeric rule and the size count should decide, worked out
// another way than the code under test, on encoding/json's reading of the
// document and with math/big arithmetic, so that the two can disagree.

// jsonFacts is what an oracle reads from a valid JSON document through
// encoding/json's token stream.
type jsonFacts struct {
	duplicate bool     // some object has a member name twice (after unescaping)
	nul       bool     // some string or member name holds U+0000
	numbers   []string // every number, as written
	depth     int      // how deep it nests ([] and {} are one level)
}

// readJSONFacts walks a document json.Valid accepts.
func readJSONFacts(b []byte) jsonFacts {
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]bool
	}
	var (
		facts jsonFacts
		stack []*frame
	)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return facts
		}
		if err != nil {
			panic("readJSONFacts on invalid JSON: " + err.Error())
		}
		if key, ok := tok.(string); ok && len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey {
			top := stack[len(stack)-1]
			facts.duplicate = facts.duplicate || top.keys[key]
			facts.nul = facts.nul || strings.ContainsRune(key, 0)
			top.keys[key], top.wantKey = true, false
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				stack = append(stack, &frame{obj: v == '{', wantKey: v == '{', keys: map[string]bool{}})
				facts.depth = max(facts.depth, len(stack))
				continue
			}
			stack = stack[:len(stack)-1]
		case string:
			facts.nul = facts.nul || strings.ContainsRune(v, 0)
		case json.Number:
			facts.numbers = append(facts.numbers, string(v))
		}
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true // the member's value is read
		}
	}
}

// surrogateEscape matches every \uD800-\uDFFF escape (and some text that
// only looks like one, such as \\ud800): where it does not match, the
// document holds no surrogate escape at all.
var surrogateEscape = regexp.MustCompile(`(?i)\\ud[89a-f]`)

// exactNames reports whether every member name where a struct is expected
// is exactly the JSON name of one of its fields; v is the document as
// encoding/json decodes it into any, t the type it is decoded into.
func exactNames(v any, t reflect.Type) bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return true
	}
	if s, ok := reflect.Zero(t).Interface().(shaper); ok {
		return exactNames(v, s.strictShape())
	}
	if t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return true // free-form, or a type that reads itself (time.Time)
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return true // not an object: a type error, not a name
		}
		byName := map[string]reflect.Type{}
		for _, f := range reflect.VisibleFields(t) {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || f.Anonymous || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			byName[name] = f.Type
		}
		for k, fv := range obj {
			ft, ok := byName[k]
			if !ok || !exactNames(fv, ft) {
				return false
			}
		}
	case reflect.Map:
		obj, _ := v.(map[string]any)
		for _, ev := range obj {
			if !exactNames(ev, t.Elem()) {
				return false
			}
		}
	case reflect.Slice, reflect.Array:
		arr, _ := v.([]any)
		for _, ev := range arr {
			if !exactNames(ev, t.Elem()) {
				return false
			}
		}
	}
	return true
}

// jsonNumber is RFC 8259's number grammar, parts captured: sign, integer
// digits, fraction digits, exponent.
var jsonNumber = regexp.MustCompile(`^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$`)

// pgNumeric is PostgreSQL's numeric_in on a JSON number, restated with
// big integers after numeric.c: set_var_from_str refuses an exponent
// |e| >= INT_MAX/2; the decimal weight of the first nonzero digit becomes
// the base-10000 weight floor(dweight/4), which make_result must fit in an
// int16, and the display scale (fraction digits less the exponent, at least
// 0) in 14 bits. When it fits, text is the number as numeric_out writes
// it, from math/big (empty when math/big refuses an exponent that large).
func pgNumeric(lit string) (fits bool, text string) {
	m := jsonNumber.FindStringSubmatch(lit)
	if m == nil {
		panic("pgNumeric: not a JSON number: " + lit)
	}
	intPart, frac := m[2], m[3]
	exp := new(big.Int)
	if m[4] != "" {
		exp.SetString(m[4], 10)
	}
	limit := big.NewInt((1<<31 - 1) / 2) // INT_MAX / 2
	if new(big.Int).Abs(exp).Cmp(limit) >= 0 {
		return false, ""
	}
	scale := new(big.Int).Sub(big.NewInt(int64(len(frac))), exp)
	if scale.Sign() < 0 {
		scale.SetInt64(0)
	}
	if scale.Cmp(big.NewInt(1<<14-1)) > 0 {
		return false, ""
	}
	digits := intPart + frac
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 { // zero: always stored, as 0 with the scale's zeros
		if scale.Sign() == 0 {
			return true, "0"
		}
		return true, "0." + strings.Repeat("0", int(scale.Int64()))
	}
	dweight := new(big.Int).Add(big.NewInt(int64(len(intPart)-1-first)), exp)
	weight := new(big.Int).Div(dweight, big.NewInt(4)) // Euclidean: floor for a positive divisor
	if weight.Cmp(big.NewInt(1<<15-1)) > 0 {
		return false, ""
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok {
		return true, ""
	}
	return true, r.FloatString(int(scale.Int64()))
}

// storedSizeOracle is the size a value that passed the strict pass counts
// against the body limit: its compact encoding, each number lengthened to
// PostgreSQL's spelling when that is longer. ok is false when the oracle
// cannot tell (math/big refused a number).
func storedSizeOracle(b []byte) (size int64, ok bool) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		panic("storedSizeOracle on invalid JSON: " + err.Error())
	}
	size = int64(compact.Len())
	for _, n := range readJSONFacts(b).numbers {
		fits, text := pgNumeric(n)
		if !fits || text == "" {
			return 0, false
		}
		size += max(0, int64(len(text)-len(n)))
	}
	return size, true
}
