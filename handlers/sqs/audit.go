package sqs

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// auditedActions are the SQS actions the audit log records (API.md §
// Access control), with the action each records: REST's words for the
// same change (handlers' audited routes), and the cancel of a move task,
// which REST has none of. Every other action is a read or on the hot
// path, as on REST.
var auditedActions = map[string]string{ //nolint:gochecknoglobals // a read-only table
	"CreateQueue":           "queue.put",
	"SetQueueAttributes":    "queue.put",
	"TagQueue":              "queue.put",
	"UntagQueue":            "queue.put",
	"DeleteQueue":           "queue.delete",
	"PurgeQueue":            "messages.purge",
	"StartMessageMoveTask":  "messages.move",
	"CancelMessageMoveTask": "messages.move_cancel",
}

// auditWriteTimeout bounds the write of one entry; it does not end with
// the request.
const auditWriteTimeout = 5 * time.Second

// auditRecord writes the audit entry of an audited action, before its
// answer is sent, successful (status 200) or not (err's status). A request
// without a verified signature is not recorded (as REST's 401s are not);
// its resource is the queue whose permission was checked first
// ("queue:<name>"; "queue:" when the request failed before naming one). A
// failed write is logged and counted, and never changes the answer.
func (f *face) auditRecord(cl *call, err error) {
	action, ok := auditedActions[cl.action]
	if !ok || cl.keyID == "" {
		return
	}
	status := http.StatusOK
	if err != nil {
		e, _ := toAPIError(err)
		status = e.Status
	}
	e := store.AuditEntry{KeyName: cl.key.Name, Action: action, RequestID: requestID(cl.c), Status: status,
		Resource: strings.ToValidUTF8(string(access.Queue)+":"+cl.resource, "\uFFFD")}
	if id := handlers.ClientRequestID(cl.c); id != "" {
		e.ClientRequestID = &id
	}
	if id, ok := store.ParseKeyID(cl.key.ID); ok && !cl.key.Admin {
		e.KeyID = &id
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cl.ctx), auditWriteTimeout)
	defer cancel()
	if werr := store.AuditRecord(ctx, f.Pool, e); werr != nil {
		f.Log.Error("audit log write failed", "request_id", e.RequestID, "action", action,
			"resource", e.Resource, "status", status, "key_id", cl.key.ID, "error", werr)
		if f.Metrics != nil {
			f.Metrics.AuditWriteFailed()
		}
	}
}
