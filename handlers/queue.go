package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// queueRequest is the body of PUT /v1/queues/{queue}; every field optional.
type queueRequest struct {
	VisibilityTimeoutSeconds *int   `json:"visibility_timeout_seconds"`
	MaxReceives              *int   `json:"max_receives"`
	RetentionSeconds         *int   `json:"retention_seconds"`
	DelaySeconds             *int   `json:"delay_seconds"`
	DedupWindowSeconds       *int   `json:"dedup_window_seconds"`
	MaxDepth                 *int64 `json:"max_depth"`
	RetryMinSeconds          *int   `json:"retry_min_seconds"`
	RetryMaxSeconds          *int   `json:"retry_max_seconds"`
	// DeadLetterQueue: the queue dead letters move into; null: none.
	DeadLetterQueue rawOf[string] `json:"dead_letter_queue"`
	// Push: null removes push; see pushRequest.
	Push               rawOf[pushRequest] `json:"push"`
	ReceiveWaitSeconds *int               `json:"receive_wait_seconds"`
	MaxMessageSize     *int               `json:"max_message_size"`
	ContentBasedDedup  *bool              `json:"content_based_dedup"`
	Tags               *map[string]string `json:"tags"`
}

// Bounds of queue settings. They are part of the contract (openapi.yaml).
const (
	maxVisibilitySeconds = 43200   // 12 h, as SQS
	maxRetentionSeconds  = 1209600 // 14 d
	minRetentionSeconds  = 60
	maxDelaySeconds      = 86400
	maxDedupSeconds      = 86400
	maxReceivesLimit     = 1000
	maxDepthLimit        = 1_000_000_000_000
	maxReceiveWait       = 20     // seconds, as wait_seconds and SQS
	minMessageSize       = 1024   // bytes, SQS's MaximumMessageSize range
	maxMessageSize       = 262144 // 256 KiB
	maxTagKeyChars       = 128    // SQS's tag limits
	maxTagValueChars     = 256
)

// patch is the store's patch of the request's queue settings (push
// aside: see pushPatch).
func (r queueRequest) patch() store.QueuePatch {
	return store.QueuePatch{
		VisibilityTimeoutSeconds: r.VisibilityTimeoutSeconds,
		MaxReceives:              maxReceivesIn(r.MaxReceives),
		RetentionSeconds:         r.RetentionSeconds,
		DelaySeconds:             r.DelaySeconds,
		DedupWindowSeconds:       r.DedupWindowSeconds,
		MaxDepth:                 r.MaxDepth,
		RetryMinSeconds:          r.RetryMinSeconds,
		RetryMaxSeconds:          r.RetryMaxSeconds,
		DeadLetterQueue:          deadLetterQueueOf(r.DeadLetterQueue),
		ReceiveWaitSeconds:       r.ReceiveWaitSeconds,
		MaxMessageSize:           r.MaxMessageSize,
		ContentBasedDedup:        r.ContentBasedDedup,
		Tags:                     r.Tags,
	}
}

// validate checks the request's settings (see checkQueueSettings);
// max_receives may also be 0 (never dead-lettered) on a queue, and
// visibility_timeout_seconds 0 (see [queueOnly]).
func (r queueRequest) validate() error {
	if err := checkDeadLetterQueue(r.DeadLetterQueue); err != nil {
		return err
	}
	p := r.patch()
	if r.MaxReceives != nil && *r.MaxReceives == 0 {
		p.MaxReceives = nil
	}
	return checkQueueSettings(queueOnly(p))
}

// queueOnly is p without the values a queue may have and a subscription
// may not, for checkQueueSettings: visibility_timeout_seconds 0, as SQS's
// VisibilityTimeout 0 (a received message is visible again at once; its
// receipt can only ack it, until it is received again). A subscription's
// deliveries need a lease.
func queueOnly(p store.QueuePatch) store.QueuePatch {
	if p.VisibilityTimeoutSeconds != nil && *p.VisibilityTimeoutSeconds == 0 {
		p.VisibilityTimeoutSeconds = nil
	}
	return p
}

// maxReceivesIn is a queue request's max_receives for the store: 0 is
// store.MaxReceivesNever.
func maxReceivesIn(n *int) *int {
	if n != nil && *n == 0 {
		never := store.MaxReceivesNever
		return &never
	}
	return n
}

// maxReceivesOut is a queue's max_receives as REST shows it: 0 for
// store.MaxReceivesNever.
func maxReceivesOut(n int) int {
	if n == store.MaxReceivesNever {
		return 0
	}
	return n
}

// CheckQueueSettings checks the bounds of queue settings as a PUT of a
// queue checks them, for another face (the SQS face); the error is the
// [*Problem] REST answers. MaxReceives may be store.MaxReceivesNever,
// VisibilityTimeoutSeconds 0.
func CheckQueueSettings(p store.QueuePatch) error {
	if p.MaxReceives != nil && *p.MaxReceives == store.MaxReceivesNever {
		p.MaxReceives = nil
	}
	return checkQueueSettings(queueOnly(p))
}

// checkQueueSettings checks the bounds of the settings a PUT of a queue or
// of a subscription gives (a subscription's request has no delay, dedup
// window or max depth), in the order of the fields.
func checkQueueSettings(p store.QueuePatch) error {
	var cs checks
	cs.intRange("visibility_timeout_seconds", p.VisibilityTimeoutSeconds, 1, maxVisibilitySeconds)
	cs.intRange("max_receives", p.MaxReceives, 1, maxReceivesLimit)
	cs.intRange("retention_seconds", p.RetentionSeconds, minRetentionSeconds, maxRetentionSeconds)
	cs.intRange("delay_seconds", p.DelaySeconds, 0, maxDelaySeconds)
	cs.intRange("dedup_window_seconds", p.DedupWindowSeconds, 0, maxDedupSeconds)
	if p.MaxDepth != nil && (*p.MaxDepth < 0 || *p.MaxDepth > maxDepthLimit) {
		cs.add("max_depth", "must be between 0 and %d", int64(maxDepthLimit))
	}
	cs.intRange("retry_min_seconds", p.RetryMinSeconds, 0, maxVisibilitySeconds)
	cs.intRange("retry_max_seconds", p.RetryMaxSeconds, 0, maxVisibilitySeconds)
	cs.intRange("receive_wait_seconds", p.ReceiveWaitSeconds, 0, maxReceiveWait)
	if v := p.MaxMessageSize; v != nil && *v != 0 && (*v < minMessageSize || *v > maxMessageSize) {
		cs.add("max_message_size", "must be 0 (the server's limit) or between %d and %d", minMessageSize, maxMessageSize)
	}
	if p.Tags != nil {
		cs.tags("tags", *p.Tags)
	}
	return cs.err()
}

// CheckTags checks tags to add to a queue by the rules of its tags
// field: keys of 1-128 characters, values of at most 256, text; the
// error is the [*Problem] REST answers. The count (at most
// store.MaxQueueTags) is the store's to check against the queue's tags.
func CheckTags(tags map[string]string) error {
	var cs checks
	cs.tags("tags", tags)
	return cs.err()
}

// tags checks a queue's tags (see CheckTags), and that there are at most
// store.MaxQueueTags.
func (cs *checks) tags(field string, tags map[string]string) {
	if len(tags) > store.MaxQueueTags {
		cs.add(field, "a queue has at most %d tags", store.MaxQueueTags)
	}
	for k, v := range tags {
		if k == "" || utf8.RuneCountInString(k) > maxTagKeyChars || !safeText(k) ||
			utf8.RuneCountInString(v) > maxTagValueChars || !safeText(v) {
			cs.add(field, "keys must be 1-%d characters and values at most %d characters of text", maxTagKeyChars, maxTagValueChars)
			return
		}
	}
}

// queueReply is a queue as clients see it.
type queueReply struct {
	Name                     string            `json:"name"`
	VisibilityTimeoutSeconds int               `json:"visibility_timeout_seconds"`
	MaxReceives              int               `json:"max_receives"`
	RetentionSeconds         int               `json:"retention_seconds"`
	DelaySeconds             int               `json:"delay_seconds"`
	DedupWindowSeconds       int               `json:"dedup_window_seconds"`
	MaxDepth                 int64             `json:"max_depth"`
	RetryMinSeconds          int               `json:"retry_min_seconds"`
	RetryMaxSeconds          int               `json:"retry_max_seconds"`
	DeadLetterQueue          *string           `json:"dead_letter_queue"`
	DeadLetterSources        []string          `json:"dead_letter_sources"`
	Push                     *pushReply        `json:"push"`
	ReceiveWaitSeconds       int               `json:"receive_wait_seconds"`
	MaxMessageSize           int               `json:"max_message_size"`
	ContentBasedDedup        bool              `json:"content_based_dedup"`
	Tags                     map[string]string `json:"tags"`
	CreatedAt                time.Time         `json:"created_at"`
	UpdatedAt                time.Time         `json:"updated_at"`
	Stats                    statsReply        `json:"stats"`
}

type statsReply struct {
	Available        int64 `json:"available"`
	InFlight         int64 `json:"in_flight"`
	Delayed          int64 `json:"delayed"`
	DeadLetters      int64 `json:"dead_letters"`
	OldestAgeSeconds int64 `json:"oldest_age_seconds"`
}

// toQueueResponse is q with its stats s and dead-letter sources, its push
// URL whole or masked (toPushResponse).
func toQueueResponse(q store.Queue, s queueExtras, wholePush bool) queueReply {
	return queueReply{
		Name:                     q.Name,
		VisibilityTimeoutSeconds: q.VisibilityTimeoutSeconds,
		MaxReceives:              maxReceivesOut(q.MaxReceives),
		RetentionSeconds:         q.RetentionSeconds,
		DelaySeconds:             q.DelaySeconds,
		DedupWindowSeconds:       q.DedupWindowSeconds,
		MaxDepth:                 q.MaxDepth,
		RetryMinSeconds:          q.RetryMinSeconds,
		RetryMaxSeconds:          q.RetryMaxSeconds,
		DeadLetterQueue:          nonEmpty(q.DeadLetterQueue),
		DeadLetterSources:        append([]string{}, s.sources...),
		Push:                     toPushResponse(q, wholePush),
		ReceiveWaitSeconds:       q.ReceiveWaitSeconds,
		MaxMessageSize:           q.MaxMessageSize,
		ContentBasedDedup:        q.ContentBasedDedup,
		Tags:                     tagsOrEmpty(q.Tags),
		CreatedAt:                q.CreatedAt.UTC(),
		UpdatedAt:                q.UpdatedAt.UTC(),
		Stats:                    statsReply(s.stats),
	}
}

func (h *handler) queuePut(c echo.Context) error {
	n, err := name(c, "queue")
	if err != nil {
		return err
	}
	var req queueRequest
	if err := h.decode(c, &req, true); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	p := req.patch()
	ctx := c.Request().Context()
	if err := h.deadLetterQueueAllowed(c, p.DeadLetterQueue); err != nil {
		return err
	}
	if p.Push, err = h.pushPatch(c, json.RawMessage(req.Push)); err != nil {
		return err
	}
	q, created, err := store.QueueUpsert(ctx, h.Pool, n, p)
	if err != nil {
		return h.upsertError(c, err)
	}
	h.queues.Forget(n)
	h.upserted(ctx, q, p.Wakes(q))
	out, err := queueView(c).one(ctx, h.Pool, q)
	if err != nil {
		return err
	}
	return secretReply(c, putStatus(created), out, q.IssuedSecret)
}

// upserted passes on what a committed upsert of the queue (or
// subscription) q asks to wake.
func (h *handler) upserted(ctx context.Context, q store.Queue, w store.UpsertWakes) {
	if w.PushChanged {
		h.pushChanged(q.ID)
		if h.Pusher != nil {
			h.Pusher.Forget()
		}
	}
	if w.PushKick && h.Pusher != nil {
		h.Pusher.Kick(ctx, []int64{q.ID})
	}
	if w.Claimable {
		h.Notifier.Rewound(q.ID)
	}
}

func (h *handler) queueGet(c echo.Context) error {
	return queueView(c).getNamed(c, h.Pool, "queue", store.QueueGet)
}

// queueList answers one page of queues; stats are computed for that page
// only.
func (h *handler) queueList(c echo.Context) error {
	name := func(q store.Queue) string { return q.Name }
	return queueView(c).list(c, h.Pool, "queues", readable(mayRead(c, access.Queue, ""), name, func(ctx context.Context, p listPage) ([]store.Queue, bool, error) {
		return store.QueueList(ctx, h.Pool, store.QueueListParams{After: p.after, Limit: p.limit})
	}))
}

// QueueDeleteAndClean deletes the named queue and, in the same
// transaction, inserts the River job that deletes its content in bounded
// batches: what DELETE /v1/queues/{queue} does, for every face.
func QueueDeleteAndClean(ctx context.Context, pool *pgxpool.Pool, r *river.Client[pgx.Tx], name string) error {
	return deleteAndClean(ctx, pool, r, func(tx pgx.Tx) ([]int64, int64, error) {
		id, err := store.QueueDelete(ctx, tx, name)
		return []int64{id}, 0, err
	})
}

// queueDelete removes the queue at once; its content is deleted in bounded
// batches by a River job inserted in the same transaction.
func (h *handler) queueDelete(c echo.Context) error {
	n, err := name(c, "queue")
	if err != nil {
		return err
	}
	if err := QueueDeleteAndClean(c.Request().Context(), h.Pool, h.River, n); err != nil {
		return err
	}
	h.queues.Forget(n)
	return c.NoContent(http.StatusNoContent)
}

// queueView answers queues with their stats to the request's key, which
// sees the push URL whole of those it may manage only.
func queueView(c echo.Context) view[store.Queue, queueExtras, queueReply] {
	manage := mayManage(c, access.Queue, "")
	return view[store.Queue, queueExtras, queueReply]{
		key:  func(q store.Queue) (int64, string) { return q.ID, q.Name },
		read: queueExtrasGet,
		out: func(q store.Queue, st queueExtras) queueReply {
			return toQueueResponse(q, st, manage(q.Name))
		},
	}
}

// tagsOrEmpty is tags, or an empty object for nil.
func tagsOrEmpty(tags map[string]string) map[string]string {
	if tags == nil {
		return map[string]string{}
	}
	return tags
}
