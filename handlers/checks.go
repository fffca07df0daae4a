package handlers

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/ferry-mq/ferry/internal/rules"
)

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
