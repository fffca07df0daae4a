package store

import (
	"context"
	"maps"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// QueueConfig is a queue's configuration. The zero value is not valid; see
// [DefaultQueueConfig].
type QueueConfig struct {
	VisibilityTimeoutSeconds int
	MaxReceives              int
	RetentionSeconds         int
	DelaySeconds             int
	DedupWindowSeconds       int
	MaxDepth                 int64
	RetryMinSeconds          int
	RetryMaxSeconds          int
	// DeadLetterQueue names the queue this one's dead letters move into
	// ("": they stay with it, in its dead letters).
	DeadLetterQueue string
	// ReceiveWaitSeconds is the long poll of a receive that gives no wait
	// (SQS's ReceiveMessageWaitTimeSeconds).
	ReceiveWaitSeconds int
	// MaxMessageSize bounds a message of the queue in bytes, as each face
	// measures one; 0: the server's limit alone.
	MaxMessageSize int
	// ContentBasedDedup gives a message sent without a dedup id the
	// SHA-256 of its body as one (SQS's ContentBasedDeduplication).
	ContentBasedDedup bool
}

// MaxReceivesNever is the max_receives of a queue whose messages are never
// dead-lettered for being received too often (REST's max_receives 0; an
// SQS queue without a RedrivePolicy): a receive_count no message reaches,
// so the claim, nack and push statements need no case for it.
const MaxReceivesNever = math.MaxInt32

// DefaultQueueConfig is what a new queue gets for every field not given.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{
		VisibilityTimeoutSeconds: 30,
		MaxReceives:              5,
		RetentionSeconds:         345600,
		DelaySeconds:             0,
		DedupWindowSeconds:       300,
		MaxDepth:                 0,
		RetryMinSeconds:          1,
		RetryMaxSeconds:          300,
	}
}

// QueuePatch holds the fields a PUT gives; nil fields keep their value (or
// take the default on creation).
type QueuePatch struct {
	VisibilityTimeoutSeconds *int
	MaxReceives              *int
	RetentionSeconds         *int
	DelaySeconds             *int
	DedupWindowSeconds       *int
	MaxDepth                 *int64
	RetryMinSeconds          *int
	RetryMaxSeconds          *int
	// DeadLetterQueue, when set, names the queue dead letters move into;
	// "" makes them stay with the queue again.
	DeadLetterQueue    *string
	ReceiveWaitSeconds *int
	// MaxMessageSize, when set, is the queue's message size limit; 0
	// removes it.
	MaxMessageSize    *int
	ContentBasedDedup *bool
	// Tags, when set, replace the queue's tags.
	Tags *map[string]string
	// Push, when set, changes push delivery (see PushPatch).
	Push *PushPatch
}

func (p QueuePatch) apply(c QueueConfig) QueueConfig {
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	set(&c.VisibilityTimeoutSeconds, p.VisibilityTimeoutSeconds)
	set(&c.MaxReceives, p.MaxReceives)
	set(&c.RetentionSeconds, p.RetentionSeconds)
	set(&c.DelaySeconds, p.DelaySeconds)
	set(&c.DedupWindowSeconds, p.DedupWindowSeconds)
	if p.MaxDepth != nil {
		c.MaxDepth = *p.MaxDepth
	}
	set(&c.RetryMinSeconds, p.RetryMinSeconds)
	set(&c.RetryMaxSeconds, p.RetryMaxSeconds)
	if p.DeadLetterQueue != nil {
		c.DeadLetterQueue = *p.DeadLetterQueue
	}
	set(&c.ReceiveWaitSeconds, p.ReceiveWaitSeconds)
	set(&c.MaxMessageSize, p.MaxMessageSize)
	if p.ContentBasedDedup != nil {
		c.ContentBasedDedup = *p.ContentBasedDedup
	}
	return c
}

// Validate checks the rules that involve more than one field.
func (c QueueConfig) Validate() error {
	if c.RetryMinSeconds > c.RetryMaxSeconds {
		return &ValidationError{Field: "retry_min_seconds", Message: "must not exceed retry_max_seconds"}
	}
	if c.DelaySeconds >= c.RetentionSeconds {
		return &ValidationError{Field: "delay_seconds", Message: "must be less than retention_seconds"}
	}
	return nil
}

// Queue is a queue's configuration and identity.
type Queue struct {
	ID        int64
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
	QueueConfig
	// Push is where the server delivers the queue's messages; nil for a
	// pull queue.
	Push *PushConfig
	PushState
	// IssuedSecret is set only in the answer of the upsert that created
	// the push signing secret: it is shown to the client once.
	IssuedSecret string
	// Tags are the queue's tags (SQS's queue tags): never nil.
	Tags map[string]string
}

// QueueStats describes a queue's content. Available includes grouped
// messages waiting behind their group's head.
type QueueStats struct {
	Available        int64
	InFlight         int64
	Delayed          int64
	DeadLetters      int64
	OldestAgeSeconds int64
}

const queueColumns = `id, name, created_at, updated_at, visibility_timeout_seconds, max_receives,
	retention_seconds, delay_seconds, dedup_window_seconds, max_depth, retry_min_seconds, retry_max_seconds,
	push_url, push_timeout_seconds, push_max_in_flight, push_rate_limit, push_format,
	push_failing_since, push_disabled_at, push_disabled_reason,
	(SELECT d.name FROM ferry.queues d WHERE d.id = q.dead_letter_queue_id) AS dead_letter_queue,
	q.receive_wait_seconds, coalesce(q.max_message_size, 0), q.content_based_dedup, q.tags`

func scanQueue(row pgx.Row, extra ...any) (Queue, error) {
	var (
		q    Queue
		url  *string
		dlq  *string
		push PushConfig
	)
	dest := append([]any{&q.ID, &q.Name, &q.CreatedAt, &q.UpdatedAt, &q.VisibilityTimeoutSeconds,
		&q.MaxReceives, &q.RetentionSeconds, &q.DelaySeconds, &q.DedupWindowSeconds, &q.MaxDepth,
		&q.RetryMinSeconds, &q.RetryMaxSeconds,
		&url, &push.TimeoutSeconds, &push.MaxInFlight, &push.RateLimitPerSecond, &push.Format,
		&q.FailingSince, &q.DisabledAt, &q.DisabledReason, &dlq,
		&q.ReceiveWaitSeconds, &q.MaxMessageSize, &q.ContentBasedDedup, &q.Tags}, extra...)
	err := row.Scan(dest...)
	if dlq != nil {
		q.DeadLetterQueue = *dlq
	}
	if url != nil {
		push.URL = *url
		q.Push = &push
	}
	return q, err
}

// QueueUpsert creates the named queue, or changes the given fields of an
// existing one. It reports whether the queue was created.
func QueueUpsert(ctx context.Context, db TxBeginner, name string, patch QueuePatch) (Queue, bool, error) {
	return queueUpsert(ctx, db, name, patch, false)
}

// QueueCreate creates the named queue with the patch's settings unless it
// exists: an existing queue is answered as it is, unchanged, with created
// false (SQS's CreateQueue, which compares what it answers with what was
// asked). Concurrent calls create the queue once; the others answer it.
func QueueCreate(ctx context.Context, db TxBeginner, name string, patch QueuePatch) (Queue, bool, error) {
	return queueUpsert(ctx, db, name, patch, true)
}

// queueUpsert is QueueUpsert, or with createOnly QueueCreate.
func queueUpsert(ctx context.Context, db TxBeginner, name string, patch QueuePatch, createOnly bool) (Queue, bool, error) {
	q, created, err := upsert[Queue, queueSettings]{
		lock: func(ctx context.Context, tx pgx.Tx) (Queue, error) {
			if err := deadLetterQueueLock(ctx, tx, patch.DeadLetterQueue); err != nil {
				return Queue{}, err
			}
			return scanQueue(tx.QueryRow(ctx,
				`SELECT `+queueColumns+` FROM ferry.queues q WHERE name = $1 AND topic_id IS NULL FOR UPDATE OF q`, name))
		},
		merge: func(existing Queue, created bool) (queueSettings, error) {
			if !created && createOnly {
				return queueSettings{cfg: existing.QueueConfig, push: existing.Push, tags: existing.Tags}, nil
			}
			base := DefaultQueueConfig()
			if !created {
				base = existing.QueueConfig
			}
			next, err := patch.merge(base, existing.Push)
			next.tags = existing.Tags
			if patch.Tags != nil {
				next.tags = *patch.Tags
			}
			return next, err
		},
		same: func(next queueSettings, existing Queue) bool { return next.same(existing) },
		write: func(ctx context.Context, tx pgx.Tx, next queueSettings, created bool) (Queue, error) {
			q, err := queueWrite(ctx, tx, name, next, patch.Push, created)
			if err != nil {
				return Queue{}, err
			}
			return q, deadLetterQueueSet(ctx, tx, &q, next.cfg.DeadLetterQueue, true)
		},
	}.run(ctx, db)
	if err != nil {
		return Queue{}, false, upsertError("queue upsert", err)
	}
	return q, created, nil
}

// queueSettings is what a queue (or a subscription's queue) is to be: its
// current settings (or the defaults) with a patch applied.
type queueSettings struct {
	cfg  QueueConfig
	push *PushConfig
	// tags are a queue's (a subscription has none).
	tags map[string]string
}

// merge applies the patch to the settings base and push, and validates
// the result.
func (p QueuePatch) merge(base QueueConfig, push *PushConfig) (queueSettings, error) {
	cfg := p.apply(base)
	if err := cfg.Validate(); err != nil {
		return queueSettings{}, err
	}
	push, err := p.Push.apply(push)
	if err != nil {
		return queueSettings{}, err
	}
	return queueSettings{cfg: cfg, push: push}, nil
}

// same reports whether the settings are those q has.
func (n queueSettings) same(q Queue) bool {
	return n.cfg == q.QueueConfig && n.push.equal(q.Push) && maps.Equal(n.tags, q.Tags)
}

// queueWrite inserts or updates the queue's row and its push settings.
func queueWrite(ctx context.Context, tx pgx.Tx, name string, next queueSettings, push *PushPatch, created bool) (Queue, error) {
	cfg := next.cfg
	q, err := scanQueue(tx.QueryRow(ctx, `
		INSERT INTO ferry.queues AS q (name, visibility_timeout_seconds, max_receives, retention_seconds,
			delay_seconds, dedup_window_seconds, max_depth, retry_min_seconds, retry_max_seconds,
			receive_wait_seconds, max_message_size, content_based_dedup, tags)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $11, nullif($12, 0), $13, $14)
		ON CONFLICT (name) WHERE topic_id IS NULL DO UPDATE SET
			visibility_timeout_seconds = excluded.visibility_timeout_seconds,
			max_receives = excluded.max_receives,
			retention_seconds = excluded.retention_seconds,
			delay_seconds = excluded.delay_seconds,
			dedup_window_seconds = excluded.dedup_window_seconds,
			max_depth = excluded.max_depth,
			retry_min_seconds = excluded.retry_min_seconds,
			retry_max_seconds = excluded.retry_max_seconds,
			receive_wait_seconds = excluded.receive_wait_seconds,
			max_message_size = excluded.max_message_size,
			content_based_dedup = excluded.content_based_dedup,
			tags = excluded.tags,
			updated_at = now()
		WHERE NOT $10 -- creating, and another request created it first: run again as an update
		RETURNING `+queueColumns,
		name, cfg.VisibilityTimeoutSeconds, cfg.MaxReceives, cfg.RetentionSeconds, cfg.DelaySeconds,
		cfg.DedupWindowSeconds, cfg.MaxDepth, cfg.RetryMinSeconds, cfg.RetryMaxSeconds, created,
		cfg.ReceiveWaitSeconds, cfg.MaxMessageSize, cfg.ContentBasedDedup, tagsOrEmpty(next.tags)))
	if err != nil {
		return Queue{}, createRaced(err)
	}
	return q, pushSet(ctx, tx, &q, next.push, push)
}

// QueueGet returns the named queue.
func QueueGet(ctx context.Context, db DBTX, name string) (Queue, error) {
	q, err := scanQueue(db.QueryRow(ctx, `/* ferry:queue_get */ SELECT `+queueColumns+` FROM ferry.queues q WHERE name = $1 AND topic_id IS NULL`, name))
	return q, interpretError("queue get", err)
}

// QueueListParams selects one page of [QueueList].
type QueueListParams = PageParams

// QueueList returns the queues named after p.After, by name, at most
// p.Limit of them, and whether more follow. It reads queues_name_idx from
// p.After on (keyset pagination), so a page costs the same however many
// queues there are, and a queue deleted meanwhile is simply not listed.
func QueueList(ctx context.Context, db DBTX, p QueueListParams) ([]Queue, bool, error) {
	rows, err := db.Query(ctx, `
		SELECT `+queueColumns+` FROM ferry.queues q
		WHERE topic_id IS NULL AND name > $1 ORDER BY name LIMIT $2`, p.After, pageLimit(p.Limit))
	return pageCollect(rows, err, "queue list", p.Limit, func(row pgx.CollectableRow) (Queue, error) { return scanQueue(row) })
}

// QueueDelete deletes the named queue and returns its id; db must be a
// transaction. The queue's messages, dead letters and dedup ids are removed
// afterwards in bounded batches by [QueueDeleteContent], which the caller
// schedules in the same transaction. The queue's lock is taken exclusively
// first, and sends hold it in shared mode and insert only while the queue
// exists, so no message can land in a deleted queue.
func QueueDelete(ctx context.Context, tx DBTX, name string) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `
		SELECT id FROM ferry.queues, pg_advisory_xact_lock(ferry.queue_lock_key(id)) WHERE name = $1 AND topic_id IS NULL`,
		name).Scan(&id)
	if err != nil {
		return 0, interpretError("queue delete", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM ferry.queues WHERE id = $1`, id); err != nil {
		return 0, interpretError("queue delete", err)
	}
	return id, nil
}

// QueueDeleteContent deletes up to limit rows of a deleted queue's content
// and reports how many it deleted; 0 means nothing of the queue is left.
// Each statement walks at most limit rows of the queue (walkKeys) and
// deletes them by the ctid it saw, so none reads more of the queue than
// it deletes. A ctid is unique within one partition of ferry.messages
// only, so its rows are deleted by (part, ctid).
func QueueDeleteContent(ctx context.Context, db DBTX, queueID int64, limit int) (int64, error) {
	var n int64
	for _, t := range []struct{ table, key, first, cols string }{
		{"messages", "id", "0", "part, ctid"}, {"dead_letters", "id", "0", "ctid"}, {"dedup", "dedup_id", "''", "ctid"},
	} {
		b := &pgx.Batch{}
		b.Queue(ringPlannerSQL) // one implicit transaction with the delete
		del := b.Queue(`/* ferry:queue_content_delete_`+t.table+` */
			WITH RECURSIVE `+walkKeys(t.table, t.key, t.first, "", ", x."+strings.ReplaceAll(t.cols, ", ", ", x."))+`,
			victims AS MATERIALIZED (SELECT `+t.cols+` FROM walk LIMIT $2)
			DELETE FROM ferry.`+t.table+` x USING (SELECT `+t.cols+` FROM victims LIMIT $2) v WHERE (x.`+
			strings.ReplaceAll(t.cols, ", ", ", x.")+`) = (v.`+strings.ReplaceAll(t.cols, ", ", ", v.")+`)`,
			queueID, limit-int(n))
		var affected int64
		del.Exec(func(tag pgconn.CommandTag) error { affected = tag.RowsAffected(); return nil })
		if err := db.SendBatch(ctx, b).Close(); err != nil {
			return n, interpretError("queue delete content", err)
		}
		n += affected
		if n >= int64(limit) {
			return n, nil
		}
	}
	if n == 0 {
		_, err := db.Exec(ctx, `/* ferry:queue_counts_delete */ DELETE FROM ferry.queue_counts WHERE queue_id = $1`, queueID)
		return 0, interpretError("queue delete content", err)
	}
	return n, nil
}

// QueueStatsGet returns the stats of the given queues, keyed by id. Its cost
// does not grow with the number of available messages: counts come from the
// trigger-kept counters, and only messages whose visible_at lies in the
// future (in flight or delayed) are scanned.
func QueueStatsGet(ctx context.Context, db DBTX, queueIDs []int64) (map[int64]QueueStats, error) {
	rows, err := db.Query(ctx, `/* ferry:queue_stats */
		SELECT q.id,
			coalesce(c.messages, 0), coalesce(c.dead_letters, 0),
			coalesce(f.in_flight, 0), coalesce(f.delayed, 0),
			coalesce(extract(epoch FROM now() - o.sent_at)::bigint, 0)
		FROM unnest($1::bigint[]) AS q(id)
		LEFT JOIN LATERAL (
			SELECT sum(messages)::bigint AS messages, sum(dead_letters)::bigint AS dead_letters
			FROM ferry.queue_counts WHERE queue_id = q.id
		) c ON true
		LEFT JOIN LATERAL (
			SELECT count(*) FILTER (WHERE claim_token IS NOT NULL) AS in_flight,
			       count(*) FILTER (WHERE claim_token IS NULL) AS delayed
			FROM ferry.messages WHERE queue_id = q.id AND NOT waiting AND visible_at > now()
		) f ON true
		LEFT JOIN LATERAL (
			SELECT sent_at FROM ferry.messages WHERE queue_id = q.id ORDER BY id LIMIT 1
		) o ON true`, queueIDs)
	if err != nil {
		return nil, interpretError("queue stats", err)
	}
	defer rows.Close()
	stats := make(map[int64]QueueStats, len(queueIDs))
	for rows.Next() {
		var (
			id    int64
			total int64
			s     QueueStats
		)
		if err := rows.Scan(&id, &total, &s.DeadLetters, &s.InFlight, &s.Delayed, &s.OldestAgeSeconds); err != nil {
			return nil, interpretError("queue stats", err)
		}
		s.Available = max(0, total-s.InFlight-s.Delayed)
		s.OldestAgeSeconds = max(0, s.OldestAgeSeconds)
		stats[id] = s
	}
	return stats, interpretError("queue stats", rows.Err())
}

// pushSet writes a PUT's push change to the queue row q (just upserted in
// tx) and reads q back. Changing the URL clears the failure state and
// re-enables push; removing push forgets the secrets. A queue getting push
// without a secret gets patch.NewSecret, shown once via q.IssuedSecret.
func pushSet(ctx context.Context, tx pgx.Tx, q *Queue, push *PushConfig, patch *PushPatch) error {
	if patch == nil {
		return nil
	}
	var (
		url                      *string
		timeout, inflight, limit = 10, 10, 0
		format                   = PushFormatStandard
	)
	if push != nil {
		url, timeout, inflight, limit = &push.URL, push.TimeoutSeconds, push.MaxInFlight, push.RateLimitPerSecond
		format = push.Format
	}
	var issued bool
	nq, err := scanQueue(tx.QueryRow(ctx, `
		UPDATE ferry.queues q SET
			push_url = $2, push_timeout_seconds = $3, push_max_in_flight = $4, push_rate_limit = $5, push_format = $7,
			signing_secret = CASE WHEN $2::text IS NULL THEN NULL ELSE coalesce(q.signing_secret, $6) END,
			previous_secret = CASE WHEN $2::text IS NULL THEN NULL ELSE q.previous_secret END,
			previous_secret_until = CASE WHEN $2::text IS NULL THEN NULL ELSE q.previous_secret_until END,
			push_failing_since = CASE WHEN $2::text IS DISTINCT FROM q.push_url THEN NULL ELSE q.push_failing_since END,
			push_disabled_at = CASE WHEN $2::text IS DISTINCT FROM q.push_url THEN NULL ELSE q.push_disabled_at END,
			push_disabled_reason = CASE WHEN $2::text IS DISTINCT FROM q.push_url THEN NULL ELSE q.push_disabled_reason END
		WHERE id = $1
		RETURNING `+queueColumns+`, signing_secret IS NOT DISTINCT FROM $6 AND $6 <> ''`,
		q.ID, url, timeout, inflight, limit, patch.NewSecret, format), &issued)
	if err != nil {
		return err
	}
	*q = nq
	if issued {
		q.IssuedSecret = patch.NewSecret
	}
	return nil
}

// Wakes returns what an upsert with the patch, which answered q, asks to
// wake.
func (p QueuePatch) Wakes(q Queue) UpsertWakes {
	if p.Push == nil {
		return UpsertWakes{}
	}
	return UpsertWakes{PushChanged: true, PushKick: q.Push != nil && q.DisabledAt == nil}
}

// tagsOrEmpty is tags, or an empty map for nil (the column is never NULL).
func tagsOrEmpty(tags map[string]string) map[string]string {
	if tags == nil {
		return map[string]string{}
	}
	return tags
}
