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
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// decode reads the JSON request body into dst strictly: unknown fields,
// member names that differ in case, duplicate members, numbers, \u0000 and
// lone surrogates PostgreSQL cannot store ([checkJSON]), trailing data, wrong
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
	body, err := h.readBody(c)
	if err != nil {
		return err
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
	return parseStrict(body, dst)
}

// parseStrict decodes a request body into dst after the strict pass
// ([checkJSON]): invalid UTF-8, what the strict pass refuses, wrong types,
// trailing data and malformed JSON are 400s.
func parseStrict(body []byte, dst any) error {
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

// readBody reads the request body whole, within the request size limit
// (413 over it) and the body read timeout (408).
func (h *handler) readBody(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, h.limits.MaxRequestBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge("request body exceeds %d bytes", h.limits.MaxRequestBytes)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, problem(http.StatusRequestTimeout, codeTimeout,
				fmt.Sprintf("the request body did not arrive within %v", h.BodyReadTimeout))
		}
		return nil, problem(http.StatusBadRequest, codeInvalid, "could not read the request body")
	}
	if int64(len(body)) > h.limits.MaxRequestBytes {
		return nil, tooLarge("request body exceeds %d bytes", h.limits.MaxRequestBytes)
	}
	return body, nil
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

// payload checks a message's body (an event's data) and attributes, and
// encodes the attributes (see [Limits.payload]).
func (h *handler) payload(cs *checks, item, bodyName string, body json.RawMessage, attrs map[string]string) (json.RawMessage, json.RawMessage, error) {
	return h.limits.payload(cs, item, bodyName, body, attrs)
}
