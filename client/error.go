package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error is a problem (RFC 9457) that Ferry answered, or an answer that was
// not a problem but had an error status (then Code is empty and Raw holds
// what came).
type Error struct {
	// Status is the HTTP status of the answer.
	Status int `json:"status"`
	// Code is the stable machine-readable word (queue_full, not_found, ...).
	Code string `json:"code"`
	// Title is the problem type's summary, Detail this occurrence's.
	Title  string `json:"title"`
	Detail string `json:"detail"`
	// Type is the problem type URI; RequestID the server's id for the request.
	Type      string `json:"type"`
	RequestID string `json:"request_id,omitempty"`
	// Errors says which fields of the request are wrong, when it does not validate.
	Errors []FieldError `json:"errors,omitempty"`
	// RetryAfter is the answer's Retry-After, zero when it had none.
	RetryAfter time.Duration `json:"-"`
	// Raw is the answer's body as it came.
	Raw []byte `json:"-"`
}

// FieldError names one field of a request that does not validate.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("ferry: %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("ferry: %d %s: %s", e.Status, e.Code, e.Detail)
}

// Temporary reports whether the same request may succeed later: 429, 502,
// 503 and 504.
func (e *Error) Temporary() bool {
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// IsCode reports whether err is (or wraps) an [*Error] with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// newError builds the [*Error] for an answer with an error status.
func newError(status int, header http.Header, body []byte) *Error {
	e := &Error{}
	if json.Unmarshal(body, e) != nil {
		e = &Error{}
	}
	e.Status, e.Raw = status, body
	if s, err := strconv.Atoi(header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// permanentError marks a handler's error as permanent; see [Permanent].
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent wraps a handler's error to say that retrying cannot help: [Client.Work]
// moves the message to the dead letters at once instead of nacking it for
// another try. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was wrapped by [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
