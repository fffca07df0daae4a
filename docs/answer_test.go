package docs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
)

// The answers the docs show are matched in shape, not byte for byte.
//
// An answer that starts with { or [ is JSON, in which … stands for what
// is left out: as a member of an object, the other members (an object
// always may have members the docs do not show); as the last element of
// an array, any further elements; as a value, any value; inside a string,
// any run of characters ("ferry_sk_…"). Text after the JSON value is a
// remark (`("stale" if the lease had expired)`). Any other answer is text
// matched against the whole output, … again any run of characters.

// ellipsis is the stand-in for what an answer leaves out.
const ellipsis = "…"

// matchAnswer reports how the output got differs from the answer want.
func matchAnswer(want, got string) error {
	want = strings.TrimSpace(want)
	if !strings.HasPrefix(want, "{") && !strings.HasPrefix(want, "[") {
		if !globMatch(want, strings.TrimSpace(got)) {
			return fmt.Errorf("the output is not %q", want)
		}
		return nil
	}
	shape, err := parseShape(want)
	if err != nil {
		return err
	}
	value, err := decodeJSON(got)
	if err != nil {
		return fmt.Errorf("the output is not JSON: %w", err)
	}
	return matchValue(shape, value, "$")
}

// parseShape decodes an answer's JSON, each … outside a string made the
// string "…" (a value, an array's rest) or dropped (an object's other
// members).
func parseShape(answer string) (any, error) {
	text, err := shapeJSON(answer)
	if err != nil {
		return nil, fmt.Errorf("the answer %q: %w", answer, err)
	}
	v, err := decodeJSON(text)
	if err != nil {
		return nil, fmt.Errorf("the answer %q is not JSON once … is read: %w", answer, err)
	}
	return v, nil
}

func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// shapeJSON returns the leading JSON value of s with its … made JSON (see
// parseShape).
func shapeJSON(s string) (string, error) {
	var out strings.Builder
	var inObject []bool // per open bracket: an object (true) or an array
	atKey, inString, escaped, dropComma := false, false, false, false
	for _, r := range s {
		if inString {
			out.WriteRune(r)
			escaped, inString = r == '\\' && !escaped, r != '"' || escaped
			continue
		}
		switch r {
		case '"':
			inString = true
		case '{', '[':
			inObject, atKey = append(inObject, r == '{'), r == '{'
		case '}', ']':
			if len(inObject) == 0 {
				return "", fmt.Errorf("an unmatched %c", r)
			}
			inObject, dropComma = inObject[:len(inObject)-1], false
			if len(inObject) == 0 {
				out.WriteRune(r)
				return out.String(), nil
			}
		case ':':
			atKey = false
		case ',':
			if dropComma {
				dropComma = false
				continue
			}
			atKey = inObject[len(inObject)-1]
		case '…':
			if atKey { // the object's other members
				kept := strings.TrimRight(out.String(), " ")
				dropComma = !strings.HasSuffix(kept, ",")
				out.Reset()
				out.WriteString(strings.TrimSuffix(kept, ","))
				continue
			}
			out.WriteString(`"…"`)
			continue
		}
		out.WriteRune(r)
	}
	return "", errors.New("the JSON value never ends")
}

// matchValue reports where got differs from the shape want.
func matchValue(want, got any, path string) error {
	switch w := want.(type) {
	case string:
		g, ok := got.(string)
		switch {
		case w == ellipsis:
			return nil
		case !ok || !globMatch(w, g):
			return fmt.Errorf("%s is %s, want %q", path, show(got), w)
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is %s, want an object", path, show(got))
		}
		for _, k := range sortedKeys(w) {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s has no member %q: %s", path, k, show(got))
			}
			if err := matchValue(w[k], gv, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		return matchArray(w, got, path)
	case json.Number:
		g, ok := got.(json.Number)
		if !ok || !sameNumber(w, g) {
			return fmt.Errorf("%s is %s, want %s", path, show(got), w)
		}
	default: // true, false, null
		if want != got {
			return fmt.Errorf("%s is %s, want %s", path, show(got), show(want))
		}
	}
	return nil
}

// matchArray matches got against the array shape want, whose last
// element … admits further elements.
func matchArray(want []any, got any, path string) error {
	g, ok := got.([]any)
	if !ok {
		return fmt.Errorf("%s is %s, want an array", path, show(got))
	}
	open := len(want) > 0 && want[len(want)-1] == ellipsis
	if open {
		want = want[:len(want)-1]
	}
	if len(g) < len(want) || !open && len(g) != len(want) {
		return fmt.Errorf("%s has %d elements, want %d%s: %s", path, len(g), len(want), map[bool]string{true: " or more"}[open], show(got))
	}
	for i := range want {
		if err := matchValue(want[i], g[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

func sameNumber(a, b json.Number) bool {
	x, okx := new(big.Rat).SetString(a.String())
	y, oky := new(big.Rat).SetString(b.String())
	return okx && oky && x.Cmp(y) == 0
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// globMatch reports whether s is pattern with each … standing for any run
// of characters.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, ellipsis)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`).MatchString(s)
}

// problemStatus is the status of the problem an answer shows (a JSON
// object whose status member is 400 or more), or 0: the HTTP status the
// command's request is expected to get.
func problemStatus(answer string) int {
	if !strings.HasPrefix(strings.TrimSpace(answer), "{") {
		return 0
	}
	shape, err := parseShape(answer)
	if err != nil {
		return 0
	}
	obj, _ := shape.(map[string]any)
	n, _ := obj["status"].(json.Number)
	status, err := n.Int64()
	if err != nil || status < 400 {
		return 0
	}
	return int(status)
}
