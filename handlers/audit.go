package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// The audit log (API.md § Access control): every request to an audited
// route is recorded, once, when its answer has been made (before the
// server sends it: a client that has its answer finds the entry),
// successful or not —
// 400s, 403s and 404s too — with its key, the action, the resource as
// permissions name it, Ferry's request id (and the client's X-Request-Id
// beside it, if it sent a sane one), the status answered, and the hosts
// of a push URL it changed or tried to change. A request
// without a valid key (401) is not recorded: there is no key to name, and
// anyone could fill the log with them. Changes are audited, and the reads
// of dead letters (their bodies were not received by whoever reads them);
// sends, receives, acks, nacks, extends, publishes, polls, commits and
// leaves (the hot paths) and every other read are not. A failed write of the log is
// logged as an ERROR and counted (ferry_audit_write_errors_total); it
// never changes the answer, which is made before.

// auditRule is what an audited route records: its action (the stable
// words of auditedRoutes), and for a route that creates a key, that the
// resource is the key its 201 answer names.
type auditRule struct {
	action     string
	createsKey bool
}

// auditedRoutes returns the audited /v1 routes, by method and Echo path
// (as routeRules), with the action each records. Every other route that
// changes something is on the hot path, and the only reads recorded are
// of dead letters (TestEveryChangeIsAudited).
func auditedRoutes() map[string]auditRule {
	rs := map[string]auditRule{
		"PUT /v1/queues/:queue":                            {action: "queue.put"},
		"DELETE /v1/queues/:queue":                         {action: "queue.delete"},
		"DELETE /v1/queues/:queue/messages":                {action: "messages.purge"},
		"POST /v1/queues/:queue/messages/move":             {action: "messages.move"},
		"PUT /v1/topics/:topic":                            {action: "topic.put"},
		"DELETE /v1/topics/:topic":                         {action: "topic.delete"},
		"PUT " + "/v1" + subscriptionPath:                  {action: "subscription.put"},
		"DELETE " + "/v1" + subscriptionPath:               {action: "subscription.delete"},
		"POST " + "/v1" + subscriptionPath + "/seek":       {action: "subscription.seek"},
		"DELETE " + "/v1" + subscriptionPath + "/messages": {action: "messages.purge"},
		"DELETE " + "/v1" + groupPath:                      {action: "group.delete"},
		"POST " + "/v1" + groupPath + "/seek":              {action: "group.seek"},
		"POST /v1/keys":                                    {action: "key.create", createsKey: true},
		"DELETE /v1/keys/:id":                              {action: "key.delete"},
	}
	for _, base := range []string{"/v1" + queuePath, "/v1" + subscriptionPath} {
		rs["GET "+base+"/dead-letters"] = auditRule{action: "dead_letters.list"}
		rs["DELETE "+base+"/dead-letters"] = auditRule{action: "dead_letters.purge"}
		rs["POST "+base+"/dead-letters/redrive"] = auditRule{action: "dead_letters.redrive"}
		rs["POST "+base+"/rotate-secret"] = auditRule{action: "push.rotate_secret"}
		rs["POST "+base+"/enable"] = auditRule{action: "push.enable"}
	}
	return rs
}

// auditWriteTimeout bounds the write of one entry; it does not end with
// the request (whose client may be gone once it has its answer).
const auditWriteTimeout = 5 * time.Second

// audited runs serve (the permission check and the handler) and then
// records the request in the audit log under a, with the status it was
// answered. An error of serve is answered here (c.Error), so that its
// status is known; a panic is recorded as the 500 it becomes, then goes
// on up to the recover middleware.
func (h *handler) audited(c echo.Context, a auditRule, kind access.Kind, key access.Key, serve func() error) error {
	var answer *answerCapture
	if a.createsKey {
		answer = &answerCapture{ResponseWriter: c.Response().Writer}
		c.Response().Writer = answer
	}
	defer func() {
		if p := recover(); p != nil {
			h.auditRecord(c, a.resource(c, kind, nil), a.action, key, http.StatusInternalServerError)
			panic(p)
		}
	}()
	if err := serve(); err != nil {
		c.Error(err)
	}
	h.auditRecord(c, a.resource(c, kind, answer), a.action, key, c.Response().Status)
	return nil
}

// resource names what the request was about, as permissions do:
// "queue:orders", "subscription:orders/billing", "group:orders/g",
// "key:<id>". A key's id is its route's last path parameter; a created
// key's is known only from its 201 answer ("key:" when it was not made).
func (a auditRule) resource(c echo.Context, kind access.Kind, answer *answerCapture) string {
	switch {
	case a.createsKey:
		return "key:" + answer.id()
	case kind == access.Admin:
		vals := c.ParamValues()
		if len(vals) == 0 {
			return "key:"
		}
		return "key:" + vals[len(vals)-1]
	}
	return string(kind) + ":" + resourceName(c, kind)
}

// auditRecord writes one entry. Its failure is the operator's to hear
// about (a log line, a metric), never the client's.
func (h *handler) auditRecord(c echo.Context, resource, action string, key access.Key, status int) {
	// The resource comes from the raw request path (Echo routes on
	// RawPath), which may hold bytes that are not UTF-8: PostgreSQL would
	// refuse the row, and the request would go unrecorded.
	resource = strings.ToValidUTF8(resource, "\uFFFD")
	e := store.AuditEntry{KeyName: key.Name, Action: action, Resource: resource, RequestID: requestID(c), Status: status}
	if id := clientRequestID(c); id != "" {
		e.ClientRequestID = &id
	}
	if ch, ok := c.Get(auditPushChange).(pushChange); ok {
		e.PushFromHost, e.PushToHost = ch.from, ch.to
	}
	if id, ok := store.ParseKeyID(key.ID); ok && !key.Admin {
		e.KeyID = &id
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), auditWriteTimeout)
	defer cancel()
	if err := store.AuditRecord(ctx, h.Pool, e); err != nil {
		h.Log.Error("audit log write failed", "request_id", e.RequestID, "action", action,
			"resource", resource, "status", status, "key_id", key.ID, "error", err)
		h.Metrics.AuditWriteFailed()
	}
}

// auditPushChange is the echo.Context key of the pushChange a request
// made or tried (notePushChange).
const auditPushChange = "audit_push_change"

// pushChange is a change of push URL, for an audit entry: the hosts
// before and after (nil: no URL then).
type pushChange struct{ from, to *string }

// notePushChange notes that the request changes (or tries to change) the
// push URL of its target from before to after ("": none), for its audit
// entry.
func notePushChange(c echo.Context, before, after string) {
	c.Set(auditPushChange, pushChange{from: auditHost(before), to: auditHost(after)})
}

// maxAuditHost bounds a host kept in the audit log (a DNS name is at most
// 253 bytes; a port and IPv6 brackets add a few).
const maxAuditHost = 300

// auditHost is the host (with its port, if given) of a push URL as the
// audit log keeps it: never its path or query, which may hold tokens; ""
// for a URL that has none or does not parse; nil for no URL.
func auditHost(u string) *string {
	if u == "" {
		return nil
	}
	host := ""
	if p, err := url.Parse(u); err == nil {
		host = p.Host
	}
	host = strings.ToValidUTF8(host[:min(len(host), maxAuditHost)], "\uFFFD")
	return &host
}

// answerCapture keeps the start of a 201 answer, for the id of the key it
// made (the answer also holds the key's secret: it is only parsed for its
// id, and dropped with the request).
type answerCapture struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

// maxCapturedAnswer bounds what answerCapture keeps: a key's answer is
// small.
const maxCapturedAnswer = 64 << 10

func (w *answerCapture) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *answerCapture) Write(b []byte) (int, error) {
	if w.status == http.StatusCreated && w.body.Len() < maxCapturedAnswer {
		w.body.Write(b[:min(len(b), maxCapturedAnswer-w.body.Len())])
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *answerCapture) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// id is the "id" of a 201 answer; "" for any other answer.
func (w *answerCapture) id() string {
	if w == nil || w.status != http.StatusCreated {
		return ""
	}
	var made struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(w.body.Bytes(), &made) != nil {
		return ""
	}
	return made.ID
}

// auditEntryReply is one entry of GET /v1/audit.
type auditEntryReply struct {
	At              time.Time        `json:"at"`
	KeyID           string           `json:"key_id"`
	KeyName         string           `json:"key_name"`
	Action          string           `json:"action"`
	Resource        string           `json:"resource"`
	RequestID       string           `json:"request_id"`
	ClientRequestID *string          `json:"client_request_id"`
	Status          int              `json:"status"`
	PushChange      *pushChangeReply `json:"push_change"`
}

// pushChangeReply is the push_change of an audit entry.
type pushChangeReply struct {
	FromHost *string `json:"from_host"`
	ToHost   *string `json:"to_host"`
}

// auditList answers GET /v1/audit: a page of entries, newest first.
func (h *handler) auditList(c echo.Context) error {
	p, err := pageOf(c, "audit")
	if err != nil {
		return err
	}
	var before int64
	if p.after != "" {
		n, err := strconv.ParseInt(p.after, 10, 64)
		if err != nil || n <= 0 || strconv.FormatInt(n, 10) != p.after {
			return invalid("after", "is not a cursor issued by Ferry for this list")
		}
		before = n
	}
	entries, more, err := store.AuditList(c.Request().Context(), h.Pool, store.AuditPageParams{Before: before, Limit: p.limit})
	if err != nil {
		return err
	}
	out := make([]auditEntryReply, len(entries))
	for i, e := range entries {
		out[i] = auditEntryReply{At: e.At, KeyID: access.AdminKeyID, KeyName: e.KeyName, Action: e.Action,
			Resource: e.Resource, RequestID: e.RequestID, ClientRequestID: e.ClientRequestID, Status: e.Status}
		if e.KeyID != nil {
			out[i].KeyID = store.FormatKeyID(*e.KeyID)
		}
		if e.PushFromHost != nil || e.PushToHost != nil {
			out[i].PushChange = &pushChangeReply{FromHost: e.PushFromHost, ToHost: e.PushToHost}
		}
	}
	last := ""
	if len(entries) > 0 {
		last = strconv.FormatInt(entries[len(entries)-1].ID, 10)
	}
	return reply(c, http.StatusOK, map[string]any{"entries": out, "next": p.next(more, last)})
}
