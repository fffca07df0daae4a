package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// Limits are the request size limits; over one → 413 payload_too_large.
type Limits struct {
	// MaxBodyBytes bounds one message body (its compact JSON encoding).
	MaxBodyBytes int
	// MaxBatch bounds the items of one batch (messages, receipts, ids).
	MaxBatch int
	// MaxRequestBytes bounds a whole request body.
	MaxRequestBytes int64
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// name returns the path parameter p after checking it is a valid name.
func name(c echo.Context, p string) (string, error) {
	n := c.Param(p)
	if !nameRe.MatchString(n) {
		return "", invalid(p, "must match %s", nameRe)
	}
	return n, nil
}

// decode reads the JSON request body into dst strictly: unknown fields,
// trailing data, wrong types and malformed JSON are 400s; a body over the
// request limit is a 413. An empty body is allowed only if optional.
func (h *handler) decode(c echo.Context, dst any, optional bool) error {
	req := c.Request()
	if ct := req.Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return problem(http.StatusUnsupportedMediaType, codeUnsupportedMedia, "the request body must be JSON, sent with Content-Type: application/json")
		}
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, h.limits.MaxRequestBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge("request body exceeds %d bytes", h.limits.MaxRequestBytes)
		}
		return problem(http.StatusBadRequest, codeInvalid, "could not read the request body")
	}
	if int64(len(body)) > h.limits.MaxRequestBytes {
		return tooLarge("request body exceeds %d bytes", h.limits.MaxRequestBytes)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return problem(http.StatusBadRequest, codeInvalid, "a JSON request body is required")
	}
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		return problem(http.StatusBadRequest, codeInvalid, "the request body must be a JSON object, not null")
	}
	if !utf8.Valid(body) {
		return problem(http.StatusBadRequest, codeInvalid, "the request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonProblem(err)
	}
	if dec.More() {
		return problem(http.StatusBadRequest, codeInvalid, "unexpected data after the JSON body")
	}
	if _, err := dec.Token(); err != io.EOF {
		return problem(http.StatusBadRequest, codeInvalid, "unexpected data after the JSON body")
	}
	return nil
}

func jsonProblem(err error) *Problem {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn):
		return problem(http.StatusBadRequest, codeInvalid, fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return invalid(field, "must be %s, not %s", jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return problem(http.StatusBadRequest, codeInvalid, "malformed JSON: unexpected end of input")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(f, "unknown field")
	}
	return problem(http.StatusBadRequest, codeInvalid, "invalid JSON: "+err.Error())
}

func jsonKind(k string) string {
	switch k {
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer in range"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return "of another type"
}

// checks collects field errors so a client sees them all at once.
type checks []FieldError

func (cs *checks) add(field, format string, args ...any) {
	*cs = append(*cs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (cs *checks) intRange(field string, v *int, lo, hi int) {
	if v != nil && (*v < lo || *v > hi) {
		cs.add(field, "must be between %d and %d", lo, hi)
	}
}

func (cs checks) err() error {
	if len(cs) == 0 {
		return nil
	}
	p := problem(http.StatusBadRequest, codeInvalid, cs[0].Field+": "+cs[0].Message)
	if len(cs) > 1 {
		p.Detail = fmt.Sprintf("%d invalid fields; first: %s: %s", len(cs), cs[0].Field, cs[0].Message)
	}
	p.Errors = cs
	return p
}

// safeText reports whether s can be stored as Postgres text (no NUL).
func safeText(s string) bool { return !strings.ContainsRune(s, 0) }

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// reply writes v as JSON with the given status.
func reply(c echo.Context, status int, v any) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().WriteHeader(status)
	return jsonEncode(c.Response(), v)
}

// compactLen is the length of raw's compact JSON encoding.
func compactLen(raw []byte) int {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return len(raw)
	}
	return b.Len()
}

// jsonbRefuses tells why PostgreSQL's jsonb would refuse raw, a valid JSON
// value, or returns "". jsonb cannot hold the escape \u0000, unpaired
// surrogate escapes, or numbers beyond its numeric type (131072 digits
// before the decimal point, 16383 after).
func jsonbRefuses(raw []byte) string {
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] != '\\' {
					continue
				}
				i++
				if raw[i] != 'u' {
					continue
				}
				r := hex4(raw[i+1 : i+5])
				i += 4
				switch {
				case r == 0:
					return `the escape \u0000`
				case r >= 0xD800 && r <= 0xDBFF:
					if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
						if lo := hex4(raw[i+3 : i+7]); lo >= 0xDC00 && lo <= 0xDFFF {
							i += 6
							continue
						}
					}
					return "an unpaired surrogate escape"
				case r >= 0xDC00 && r <= 0xDFFF:
					return "an unpaired surrogate escape"
				}
			}
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(raw) && strings.IndexByte("+-0123456789.eE", raw[j]) >= 0 {
				j++
			}
			if !numericFits(string(raw[i:j])) {
				return "a number beyond PostgreSQL's numeric range"
			}
			i = j - 1
		}
	}
	return ""
}

func hex4(b []byte) rune {
	v, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(v)
}

// numericFits reports whether a JSON number fits PostgreSQL's numeric.
func numericFits(num string) bool {
	mant, exp := num, 0
	if k := strings.IndexAny(num, "eE"); k >= 0 {
		mant = num[:k]
		e, err := strconv.Atoi(num[k+1:])
		if err != nil || e > 1_000_000 || e < -1_000_000 {
			return false
		}
		exp = e
	}
	mant = strings.TrimPrefix(mant, "-")
	intPart, frac, _ := strings.Cut(mant, ".")
	intPart = strings.TrimLeft(intPart, "0")
	if strings.Trim(intPart+frac, "0") == "" {
		return true // zero, whatever its exponent
	}
	before := len(intPart) + exp
	after := len(frac) - exp
	return before <= 131072 && after <= 16383
}
