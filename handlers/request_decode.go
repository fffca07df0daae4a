package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/rules"
)

// Limits are the request size limits; over one → 413 payload_too_large.
type Limits struct {
	// MaxBodyBytes bounds one message's body and attributes together (an
	// event's data and attributes): their compact JSON encoding, numbers
	// counted as PostgreSQL writes them (storedSize).
	MaxBodyBytes int
	// MaxBatch bounds the items of one batch (messages, receipts, ids).
	MaxBatch int
	// MaxRequestBytes bounds a whole request body.
	MaxRequestBytes int64
}

// DefaultLimits are the limits of a zero [Limits]: those of Ferry's
// default configuration.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 256 << 10, MaxBatch: 1000, MaxRequestBytes: 10 << 20}
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidName reports whether s is a valid name of a queue, topic,
// subscription or group: the rule every face applies.
func ValidName(s string) bool { return nameRe.MatchString(s) }

// name returns the path parameter p after checking it is a valid name.
func name(c echo.Context, p string) (string, error) {
	n := c.Param(p)
	if !nameRe.MatchString(n) {
		return "", invalid(p, "must match %s", nameRe)
	}
	return n, nil
}

// decode reads the JSON request body into dst strictly: unknown fields,
// member names that differ in case, duplicate members, numbers, \u0000 and
// lone surrogates PostgreSQL cannot store (strict.go), trailing data, wrong
// types and malformed JSON are 400s; a body over the request limit is a
// 413, one that does not arrive in time a 408. An empty body is allowed
// only if optional.
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
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return problem(http.StatusRequestTimeout, codeTimeout,
				fmt.Sprintf("the request body did not arrive within %v", h.BodyReadTimeout))
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
	strict := checkJSON(body, reflect.TypeOf(dst), "")
	if strict != nil && !errors.Is(strict, errSyntax) {
		return strict
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
	if strict != nil {
		// The decoder took what the strict pass did not (it should not).
		return problem(http.StatusBadRequest, codeInvalid, "malformed JSON")
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

// queryInt reads an integer query parameter, def when absent. It must be
// written as Ferry writes integers (no sign, no leading zeros; not empty),
// so that an offset or limit has one spelling, and lie in [lo, hi].
// (queryParams has already refused a parameter given twice.)
func queryInt(c echo.Context, name string, def, lo, hi int64) (int64, error) {
	vs, ok := c.QueryParams()[name]
	if !ok {
		return def, nil
	}
	s := vs[0]
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s || v < lo || v > hi {
		return 0, invalid(name, "must be an integer between %d and %d, written without sign or leading zeros", lo, hi)
	}
	return v, nil
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

// attributes checks a message's or event's attributes: keys of 1-256
// bytes, values of at most 4096, text without NUL, and a traceparent (which
// push delivery passes on as a header) in the W3C format.
func (cs *checks) attributes(field string, attrs map[string]string) {
	for k, v := range attrs {
		if k == "" || len(k) > 256 || !safeText(k) || len(v) > 4096 || !safeText(v) {
			cs.add(field, "keys must be 1-256 bytes and values at most 4096 bytes of text")
			break
		}
	}
	if v, ok := attrs["traceparent"]; ok && !rules.ValidTraceparent(v) {
		cs.add(field+".traceparent", "must be a W3C trace context traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros")
	}
}

// payload checks a message's body (an event's data) and attributes, and
// encodes the attributes (see [Limits.payload]).
func (h *handler) payload(cs *checks, item, bodyName string, body json.RawMessage, attrs map[string]string) (json.RawMessage, json.RawMessage, error) {
	return h.limits.payload(cs, item, bodyName, body, attrs)
}

// payload checks a message's body (an event's data) and attributes, and
// encodes the attributes. Together they must be within the body limit (a
// 413 over it); a body sent with whitespace and over the limit as sent is
// kept compact. item names the message or event ("messages[3]").
func (l Limits) payload(cs *checks, item, bodyName string, body json.RawMessage, attrs map[string]string) (json.RawMessage, json.RawMessage, error) {
	var enc json.RawMessage
	if len(attrs) > 0 {
		cs.attributes(item+".attributes", attrs)
		enc, _ = json.Marshal(attrs)
	}
	if size := storedSize(body) + int64(len(enc)); size > int64(l.MaxBodyBytes) {
		return nil, nil, tooLarge("%s: %s and attributes are %d bytes; the limit is %d", item, bodyName, size, l.MaxBodyBytes)
	}
	if len(body) > l.MaxBodyBytes {
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			return nil, nil, invalid(item+"."+bodyName, "is not valid JSON")
		}
		body = compact.Bytes()
	}
	return body, enc, nil
}

// CheckMessage applies the rules of a REST message's body and attributes
// to one another face made (the SQS face): body is valid JSON that
// PostgreSQL can store (a JSON string the face encoded). It answers the
// body and the encoded attributes to store, or the [*Problem] REST would
// answer (400, or 413 over the body limit).
func (l Limits) CheckMessage(item string, body json.RawMessage, attrs map[string]string) (json.RawMessage, json.RawMessage, error) {
	var cs checks
	b, enc, err := l.payload(&cs, item, "body", body, attrs)
	if err != nil {
		return nil, nil, err
	}
	return b, enc, cs.err()
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

// reply answers v as JSON with the given status. It encodes v whole
// before it writes anything: a value that cannot be encoded is an error,
// which the error handler logs and answers as a 500 problem, never the
// status with a body cut short.
func reply(c echo.Context, status int, v any) error {
	var b bytes.Buffer
	if err := jsonEncode(&b, v); err != nil {
		return fmt.Errorf("encode the answer: %w", err)
	}
	return c.Blob(status, echo.MIMEApplicationJSON, b.Bytes())
}
