package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/store"
)

// Problem is an RFC 9457 problem document. Code is the stable,
// machine-readable word clients switch on.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail"`
	Code      string       `json:"code"`
	Errors    []FieldError `json:"errors,omitempty"`
	RequestID string       `json:"request_id,omitempty"`

	header http.Header
}

// FieldError names one invalid input field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// The stable problem codes.
const (
	codeInvalid          = "invalid_request"
	codeNotFound         = "not_found"
	codeQueueFull        = "queue_full"
	codeTooLarge         = "payload_too_large"
	codeUnauthorized     = "unauthorized"
	codeForbidden        = "forbidden"
	codeConflict         = "conflict"
	codeMethodNotAllowed = "method_not_allowed"
	codeUnsupportedMedia = "unsupported_media_type"
	codeTimeout          = "request_timeout"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
)

func problem(status int, code, detail string) *Problem {
	return &Problem{
		Type:   "urn:ferry:problem:" + code,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

func invalid(field, format string, args ...any) *Problem {
	msg := fmt.Sprintf(format, args...)
	p := problem(http.StatusBadRequest, codeInvalid, field+": "+msg)
	p.Errors = []FieldError{{Field: field, Message: msg}}
	return p
}

func tooLarge(format string, args ...any) *Problem {
	return problem(http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf(format, args...))
}

func toProblem(err error) *Problem {
	var (
		p    *Problem
		verr *store.ValidationError
		full *store.QueueFullError
		he   *echo.HTTPError
	)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &verr):
		return invalid(verr.Field, "%s", verr.Message)
	case errors.As(err, &full):
		p := problem(http.StatusTooManyRequests, codeQueueFull,
			fmt.Sprintf("the queue holds %d of at most %d messages; retry later", full.Depth, full.MaxDepth))
		p.header = http.Header{"Retry-After": []string{strconv.Itoa(1)}}
		return p
	case errors.As(err, &he) && he.Code < 500:
		// Before the database's errors: an echo error may wrap one that
		// looks like a lost connection (c.Bind's io.ErrUnexpectedEOF).
		switch he.Code {
		case http.StatusNotFound:
			return problem(http.StatusNotFound, codeNotFound, "no such route")
		case http.StatusMethodNotAllowed:
			return problem(http.StatusMethodNotAllowed, codeMethodNotAllowed, "method not allowed on this route")
		case http.StatusRequestEntityTooLarge:
			return tooLarge("request body too large")
		case http.StatusUnauthorized:
			return problem(http.StatusUnauthorized, codeUnauthorized, fmt.Sprint(he.Message))
		}
		return problem(he.Code, codeInvalid, fmt.Sprint(he.Message))
	case errors.Is(err, store.ErrBackfillStopped):
		p := problem(http.StatusServiceUnavailable, codeUnavailable,
			"the backfill could not finish: the database took too long for a single event. "+
				"An ordered subscription's creation or seek changed nothing; for another, what was "+
				"delivered stays and a seek to the same start completes it")
		p.header = http.Header{"Retry-After": []string{"1"}}
		return p
	case errors.Is(err, store.ErrBusy):
		p := problem(http.StatusServiceUnavailable, codeUnavailable, "the queue is busy (purged, deleted or locked by other work); nothing was written, retry")
		p.header = http.Header{"Retry-After": []string{"1"}}
		return p
	case store.IsUnavailable(err):
		p := problem(http.StatusServiceUnavailable, codeUnavailable, "the database is unreachable or at a limit (locks, connections, memory or time); retry later, with the same dedup_id or event id if the request may have been applied")
		p.header = http.Header{"Retry-After": []string{"1"}}
		return p
	case errors.Is(err, store.ErrShuttingDown):
		return problem(http.StatusServiceUnavailable, codeUnavailable, "the server is shutting down; retry on another instance")
	case errors.Is(err, store.ErrNotFound):
		return problem(http.StatusNotFound, codeNotFound, "no such resource")
	case errors.Is(err, store.ErrConflict):
		return problem(http.StatusConflict, codeConflict, "the request conflicts with the resource's state")
	}
	return problem(http.StatusInternalServerError, codeInternal, "internal error; see the server log for this request id")
}
