package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PublishEvent is one event of a publish batch, already validated.
type PublishEvent struct {
	ID         string // "" = generate one
	Type       string
	Key        *string
	Data       json.RawMessage // nil = no data
	Attributes json.RawMessage // a JSON object, or nil
}

// PublishResult is where one published event landed.
type PublishResult struct {
	ID        string
	Partition int
	Offset    int64
	Duplicate bool
}

// PartitionForKey is the partition of a keyed event: the FNV-1a 32-bit
// hash of the key's UTF-8 bytes, as an unsigned integer, modulo the
// partitions. Growing a topic's partitions remaps keys.
func PartitionForKey(key string, partitions int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// spread hands out partitions round-robin to keyless events, per topic.
var spread sync.Map // topic id → *atomic.Uint64

func nextPartition(topicID int64, partitions int) int {
	v, _ := spread.LoadOrStore(topicID, new(atomic.Uint64))
	return int(v.(*atomic.Uint64).Add(1) % uint64(partitions))
}

// NewEventID makes an id for an event published without one.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

// EventPublish appends events to the topic and answers, in order, where
// each landed. An id seen on the topic within its dedup window (or earlier
// in the batch) is a duplicate: it answers the original's partition and
// offset and appends nothing.
//
// It is one transaction in two round trips. First the event ids are
// claimed in ferry.event_dedup (in id order, so two publishes of the same
// ids never wait on each other crosswise) and every claimed id's row is
// read back: a duplicate's row, committed by the publish that beat it,
// tells where the original landed. Then the partition rows are locked (in
// partition order), offsets next_offset..next_offset+n-1 taken, the events
// appended with the dedup rows pointing at them, and the transaction
// committed. The partition locks are thus held for one round trip and the
// commit; a transaction never waits for a partition while holding one, or
// for an id while holding a partition.
//
// Offsets of a partition are therefore assigned by one transaction at a
// time, densely and in commit order. published_at is the clock read under
// the lock, so it grows with the offset (as long as the server's clock
// does not step back), and the first event at or after a time is also the
// lowest offset at or after it.
func EventPublish(ctx context.Context, pool *pgxpool.Pool, t Topic, events []PublishEvent) ([]PublishResult, []int64, error) {
	results := make([]PublishResult, len(events))
	firstOf := map[string]int{}
	repeatOf := make([]int, len(events))
	var (
		ids, types, keys, data, attrs []*string
		parts                         []int32
		index                         []int // position in events of each row sent
	)
	for i, e := range events {
		repeatOf[i] = -1
		id := e.ID
		if id == "" {
			id = NewEventID()
		}
		results[i].ID = id
		if j, ok := firstOf[id]; ok {
			repeatOf[i] = j
			continue
		}
		firstOf[id] = i
		p := 0
		if e.Key != nil {
			p = PartitionForKey(*e.Key, t.Partitions)
		} else {
			p = nextPartition(t.ID, t.Partitions)
		}
		results[i].Partition = p
		idc, typ := id, e.Type
		ids = append(ids, &idc)
		types = append(types, &typ)
		keys = append(keys, e.Key)
		data = append(data, rawPtr(e.Data))
		attrs = append(attrs, rawPtr(e.Attributes))
		parts = append(parts, int32(p))
		index = append(index, i)
	}
	var fed []int64
	// More attempts than other transactions: a publish also starts again
	// when a subscription of the topic changed meanwhile.
	err := retryN(ctx, 10, func() error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		fed, err = publishTx(ctx, conn.Conn(), t, ids, types, keys, data, attrs, parts, index, results)
		if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
			// Leave the connection clean; the pool drops it if this fails.
			_, _ = conn.Exec(context.Background(), "ROLLBACK")
		}
		return err
	})
	if err != nil {
		return nil, nil, interpretError("event publish", err)
	}
	for i, j := range repeatOf {
		if j >= 0 {
			results[i] = PublishResult{ID: results[j].ID, Partition: results[j].Partition, Offset: results[j].Offset, Duplicate: true}
		}
	}
	return results, fed, nil
}

// publishTx runs EventPublish's transaction on conn: BEGIN travels with
// the first batch and COMMIT with the second.
func publishTx(ctx context.Context, conn *pgx.Conn, t Topic, ids, types, keys, data, attrs []*string,
	parts []int32, index []int, results []PublishResult) ([]int64, error) {
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`/* ferry:event_dedup_claim */
		INSERT INTO ferry.event_dedup AS d (topic_id, event_id, partition, "offset", expires_at)
		SELECT $1, id, p, -1, now() + make_interval(secs => $4)
		FROM unnest($2::text[], $3::int[]) AS t(id, p) ORDER BY id
		ON CONFLICT (topic_id, event_id) DO UPDATE
			SET partition = excluded.partition, "offset" = -1, expires_at = excluded.expires_at
			WHERE d.expires_at <= now()`, t.ID, ids, parts, t.DedupWindowSeconds)
	// Fresh claims read back as offset -1 (this transaction's own rows);
	// duplicates as the committed original.
	// One probe per id, by the whole key: with topic_id = $1 AND event_id
	// = ANY($2) the planner may descend on topic_id alone and walk every
	// id the topic remembers.
	b.Queue(`/* ferry:event_dedup_read */
		SELECT d.event_id, d.partition, d."offset" FROM unnest($2::text[]) AS i(id)
		CROSS JOIN LATERAL (
			SELECT event_id, partition, "offset" FROM ferry.event_dedup WHERE topic_id = $1 AND event_id = i.id LIMIT 1
		) d`, t.ID, ids)
	// The subscriptions to fan out to, and the version they are at: the
	// second round trip checks, under the partition locks, that it has
	// not changed since (see lockTopicForSubscriptions).
	b.Queue(`/* ferry:topic_subscriptions_read */
		SELECT t.subs_version, q.id, q.filter::text, q.ordered
		FROM ferry.topics t LEFT JOIN ferry.queues q ON q.topic_id = t.id
		WHERE t.id = $1 ORDER BY q.id`, t.ID)
	br := conn.SendBatch(ctx, b)
	rows, err := func() (pgx.Rows, error) {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return nil, err
			}
		}
		return br.Query()
	}()
	if err != nil {
		br.Close()
		return nil, err
	}
	claims := map[string]PublishResult{}
	for rows.Next() {
		var r PublishResult
		if err := rows.Scan(&r.ID, &r.Partition, &r.Offset); err != nil {
			rows.Close()
			br.Close()
			return nil, err
		}
		claims[r.ID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		br.Close()
		return nil, err
	}
	subsVersion, subs, err := readFanoutSubs(br)
	if err != nil {
		br.Close()
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}

	var (
		fIDs, fTypes, fKeys, fData, fAttrs []*string
		fParts                             []int32
		fIndex                             []int
	)
	for k, i := range index {
		c := claims[*ids[k]]
		if c.Offset >= 0 {
			results[i].Duplicate = true
			results[i].Partition, results[i].Offset = c.Partition, c.Offset
			continue
		}
		results[i].Duplicate = false
		fIDs = append(fIDs, ids[k])
		fTypes = append(fTypes, types[k])
		fKeys = append(fKeys, keys[k])
		fData = append(fData, data[k])
		fAttrs = append(fAttrs, attrs[k])
		fParts = append(fParts, parts[k])
		fIndex = append(fIndex, i)
	}
	touched := append([]int32{}, fParts...) // never nil: NULL would not compare
	slices.Sort(touched)
	touched = slices.Compact(touched)
	fan := planFanout(subs, fTypes, fKeys, fAttrs, fData)

	b = &pgx.Batch{}
	// A deleted topic has no partition rows: then the transaction stops
	// here and nothing of it, dedup claims included, is kept (also when
	// every event was a duplicate and no partition is to be locked).
	b.Queue(`/* ferry:topic_partitions_lock */
		SELECT CASE
			WHEN count(*) = cardinality($2::int[]) AND EXISTS (SELECT 1 FROM ferry.topic_partitions WHERE topic_id = $1)
			THEN count(*) ELSE ferry.raise_not_found('topic') END
		FROM (
			SELECT 1 FROM ferry.topic_partitions
			WHERE topic_id = $1 AND partition = ANY($2) ORDER BY partition FOR UPDATE
		) locked`, t.ID, touched)
	b.Queue(`/* ferry:topic_subscriptions_check */
		SELECT CASE WHEN subs_version = $2 THEN 0 ELSE ferry.raise_retry('subscriptions changed') END
		FROM ferry.topics WHERE id = $1`, t.ID, subsVersion)
	if len(fan.lockQueues) > 0 {
		b.Queue(`/* ferry:event_group_locks */
			SELECT count(pg_advisory_xact_lock(k)) FROM (
				SELECT DISTINCT ferry.group_lock_key(q, g) AS k FROM unnest($1::bigint[], $2::text[]) AS l(q, g) ORDER BY k
			) locks`, fan.lockQueues, fan.lockGroups)
	}
	b.Queue(`/* ferry:event_append */
		WITH input AS (
			SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[])
				WITH ORDINALITY AS t(id, type, key, partition, data, attributes, ord)
		),
		counts AS (SELECT partition, count(*) AS n FROM input GROUP BY partition),
		bumped AS (
			UPDATE ferry.topic_partitions p SET next_offset = p.next_offset + c.n
			FROM counts c WHERE p.topic_id = $1 AND p.partition = c.partition
			RETURNING p.partition, p.next_offset - c.n AS base
		),
		placed AS MATERIALIZED (
			SELECT i.id, i.type, i.key, i.partition, i.ord, i.data::jsonb AS data, i.attributes::jsonb AS attributes,
				b.base + row_number() OVER (PARTITION BY i.partition ORDER BY i.ord) - 1 AS off,
				clock_timestamp() AS at
			FROM input i JOIN bumped b USING (partition)
		),
		-- With the event as deliveries carry it, made once per event (not
		-- once per subscription), and only when some subscription matched
		-- ($11[ord]: a lookup, where a list of matched events would be a
		-- join, and one the planner may run as a nested loop).
		numbered AS MATERIALIZED (
			SELECT p.*, CASE WHEN ($11::bool[])[p.ord]
				THEN ferry.event_json(p.id, p.type, p.key, p.data, p.attributes, p.partition, p.off, p.at) END AS body
			FROM placed p
		),
		appended AS (
			INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, attributes, data, published_at)
			SELECT $1, partition, off, id, type, key, attributes, data, at
			FROM numbered ORDER BY partition, off
		),
		-- Each claimed id's row (this transaction's own, so its ctid
		-- holds) by one probe of the whole key per event, then by ctid:
		-- joined on topic_id = $1, the planner may walk every id of the
		-- topic per event.
		located AS (
			UPDATE ferry.event_dedup d SET "offset" = n.off
			FROM numbered n CROSS JOIN LATERAL (
				SELECT x.ctid FROM ferry.event_dedup x WHERE x.topic_id = $1 AND x.event_id = n.id LIMIT 1
			) x
			WHERE d.ctid = x.ctid
		),
		-- One delivery per (matching subscription, event): $8..$10 list
		-- them, in event order; grp is the key for ordered subscriptions.
		fan AS (
			SELECT nextval('ferry.message_id_seq') AS mid, f.*
			FROM (
				SELECT * FROM unnest($8::bigint[], $9::int[], $10::text[]) WITH ORDINALITY AS f(queue_id, ev, grp, k)
				ORDER BY k
			) f
		),
		delivered AS (
			INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, grp, event_id, event_partition, event_offset, body)
			SELECT f.queue_id, f.mid, n.at,
				f.grp IS NOT NULL AND (
					row_number() OVER (PARTITION BY f.queue_id, f.grp ORDER BY f.mid) > 1
					OR EXISTS (SELECT 1 FROM ferry.messages x WHERE x.queue_id = f.queue_id AND x.grp = f.grp)),
				n.at, f.grp, n.id, n.partition, n.off, n.body
			FROM fan f JOIN numbered n ON n.ord = f.ev
		)
		SELECT ord, off FROM numbered`, t.ID, fIDs, fTypes, fKeys, fParts, fData, fAttrs,
		fan.queues, fan.events, fan.groups, fan.matched(len(fIDs)))
	b.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, b)
	defer br.Close()
	var locked int
	if err := br.QueryRow().Scan(&locked); err != nil {
		return nil, err
	}
	for range b.Len() - 3 { // the version check and group locks
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err = br.Query()
	if err != nil {
		return nil, err
	}
	got := 0
	for rows.Next() {
		var (
			ord int
			off int64
		)
		if err := rows.Scan(&ord, &off); err != nil {
			rows.Close()
			return nil, err
		}
		results[fIndex[ord-1]].Offset = off
		got++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	if locked != len(touched) || got != len(fIDs) {
		return nil, fmt.Errorf("event publish: %d of %d partitions, %d of %d events", locked, len(touched), got, len(fIDs))
	}
	return fan.fed(), nil
}

// fanoutSub is a subscription as a publish matches events against it.
type fanoutSub struct {
	id      int64
	filter  *Filter
	ordered bool
}

// readFanoutSubs reads the subscriptions query of publishTx's first batch.
func readFanoutSubs(br pgx.BatchResults) (int64, []fanoutSub, error) {
	rows, err := br.Query()
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var (
		version int64
		subs    []fanoutSub
	)
	for rows.Next() {
		var (
			id      *int64
			filter  *string
			ordered *bool
		)
		if err := rows.Scan(&version, &id, &filter, &ordered); err != nil {
			return 0, nil, err
		}
		if id != nil {
			subs = append(subs, fanoutSub{id: *id, filter: cachedFilter(filter), ordered: *ordered})
		}
	}
	return version, subs, rows.Err()
}

// fanout is the deliveries of one publish: parallel arrays, one entry per
// (subscription, event), in event order; and the group locks they need.
type fanout struct {
	queues     []int64
	events     []int32 // 1-based position of the event in the batch
	groups     []*string
	lockQueues []int64
	lockGroups []string
}

// planFanout matches every fresh event against every subscription.
func planFanout(subs []fanoutSub, types, keys, attrs, data []*string) fanout {
	var f fanout
	if len(subs) == 0 {
		return f
	}
	locked := map[fanoutLock]bool{}
	for i := range types {
		e := &matchEvent{typ: *types[i]}
		if attrs[i] != nil {
			e.rawAttrs = json.RawMessage(*attrs[i])
		}
		if data[i] != nil {
			e.rawData = json.RawMessage(*data[i])
		}
		for _, s := range subs {
			if !s.filter.match(e) {
				continue
			}
			var grp *string
			if s.ordered && keys[i] != nil {
				grp = keys[i]
				l := fanoutLock{s.id, *grp}
				if !locked[l] {
					locked[l] = true
					f.lockQueues = append(f.lockQueues, s.id)
					f.lockGroups = append(f.lockGroups, *grp)
				}
			}
			f.queues = append(f.queues, s.id)
			f.events = append(f.events, int32(i+1))
			f.groups = append(f.groups, grp)
		}
	}
	return f
}

type fanoutLock struct {
	queue int64
	grp   string
}

// matched says, for each of the n fresh events of the batch (by
// position), whether some subscription gets it.
func (f fanout) matched(n int) []bool {
	m := make([]bool, n)
	for _, ev := range f.events {
		m[ev-1] = true
	}
	return m
}

// fed lists the subscriptions that got deliveries, once each.
func (f fanout) fed() []int64 {
	ids := slices.Clone(f.queues)
	slices.Sort(ids)
	return slices.Compact(ids)
}

func rawPtr(r json.RawMessage) *string {
	if r == nil {
		return nil
	}
	s := string(r)
	return &s
}

// Event is an event as readers see it.
type Event struct {
	ID          string
	Type        string
	Key         *string
	Data        json.RawMessage // nil when the event had none
	Attributes  json.RawMessage // nil when none
	Partition   int
	Offset      int64
	PublishedAt time.Time
}

// ReadParams selects events of one partition: from FromOffset, or from the
// first event published at or after FromTime.
type ReadParams struct {
	Topic      Topic
	Partition  int
	FromOffset int64
	FromTime   *time.Time
	Limit      int
	// Wait, when no event is there yet, long-polls that long.
	Wait         time.Duration
	FallbackPoll time.Duration
	Stop         <-chan struct{}
}

// TopicWakeKey is the Notifier key of a topic: topics share the notifier
// with queues, whose keys are their (positive) ids.
func TopicWakeKey(topicID int64) int64 { return -topicID }

// EventRead returns up to Limit events of the partition in offset order
// and the offset to read next. With FromTime, the position is the first
// offset published at or after it.
func EventRead(ctx context.Context, db DBTX, n *Notifier, p ReadParams) ([]Event, int64, error) {
	from := p.FromOffset
	if p.FromTime != nil {
		err := db.QueryRow(ctx, `/* ferry:event_position_at */
			SELECT coalesce(
				(SELECT "offset" FROM ferry.events WHERE topic_id = $1 AND partition = $2 AND published_at >= $3
				 ORDER BY published_at, "offset" LIMIT 1),
				(SELECT next_offset FROM ferry.topic_partitions WHERE topic_id = $1 AND partition = $2), 0)`,
			p.Topic.ID, p.Partition, *p.FromTime).Scan(&from)
		if err != nil {
			return nil, 0, interpretError("event read", err)
		}
	}
	var events []Event
	err := longPoll(ctx, n, TopicWakeKey(p.Topic.ID), p.Wait, p.FallbackPoll, p.Stop, func() (bool, error) {
		var err error
		events, err = eventReadOnce(ctx, db, p.Topic.ID, p.Partition, from, p.Limit)
		return len(events) > 0, err
	})
	if err != nil {
		return nil, 0, err
	}
	if len(events) == 0 {
		return nil, max(from, oldestOffset(ctx, db, p.Topic.ID, p.Partition)), nil
	}
	return events, events[len(events)-1].Offset + 1, nil
}

// oldestOffset is the partition's oldest retained offset (its next offset
// when nothing is retained); 0 if it cannot be read.
func oldestOffset(ctx context.Context, db DBTX, topicID int64, partition int) int64 {
	var o int64
	_ = db.QueryRow(ctx, `/* ferry:event_oldest */
		SELECT coalesce(
			(SELECT "offset" FROM ferry.events WHERE topic_id = $1 AND partition = $2 ORDER BY "offset" LIMIT 1),
			(SELECT next_offset FROM ferry.topic_partitions WHERE topic_id = $1 AND partition = $2), 0)`,
		topicID, partition).Scan(&o)
	return o
}

func eventReadOnce(ctx context.Context, db DBTX, topicID int64, partition int, from int64, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, `/* ferry:event_read */
		SELECT id, type, key, data::text, attributes::text, partition, "offset", published_at
		FROM ferry.events WHERE topic_id = $1 AND partition = $2 AND "offset" >= $3
		ORDER BY "offset" LIMIT $4`, topicID, partition, from, limit)
	if err != nil {
		return nil, interpretError("event read", err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	return events, interpretError("event read", err)
}

// EventExpire deletes, per topic partition, up to limit events older than
// the topic's retention, oldest first, one topic per statement (so no
// statement deletes more than partitions × limit rows), and reports how
// many it deleted. The time index finds them without reading younger
// events.
//
// The topics with anything to expire are found first by one statement
// that looks at the oldest event of each partition, so a sweep that finds
// nothing writes nothing and commits once (DESIGN.md invariant 12).
func EventExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	rows, err := db.Query(ctx, `/* ferry:event_expire_due */
		SELECT t.id FROM ferry.topics t WHERE `+eventExpireDue+` ORDER BY t.id`)
	if err != nil {
		return 0, interpretError("event expire", err)
	}
	topics, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, interpretError("event expire", err)
	}
	var total int64
	for _, id := range topics {
		// The oldest events of each partition by the time index, and
		// then by ctid (events are never updated): joined on their key,
		// the planner may reach each through an index that walks the
		// partition.
		tag, err := db.Exec(ctx, `/* ferry:event_expire */
			DELETE FROM ferry.events e USING (
				SELECT v.ctid
				FROM ferry.topics t
				JOIN ferry.topic_partitions p ON p.topic_id = t.id
				CROSS JOIN LATERAL (
					SELECT ctid FROM ferry.events
					WHERE topic_id = t.id AND partition = p.partition
						AND published_at < now() - t.retention_seconds * interval '1 second'
					ORDER BY published_at LIMIT $2
				) v
				WHERE t.id = $1
			) old
			WHERE e.ctid = old.ctid`, id, limit)
		if err != nil {
			return total, interpretError("event expire", err)
		}
		total += tag.RowsAffected()
	}
	return total, nil
}

// eventExpireDue is true for a topic t whose oldest event in some
// partition is past retention: one probe of the time index per partition.
const eventExpireDue = `EXISTS (
			SELECT 1 FROM ferry.topic_partitions p
			CROSS JOIN LATERAL (
				SELECT e.published_at FROM ferry.events e
				WHERE e.topic_id = p.topic_id AND e.partition = p.partition
				ORDER BY e.published_at LIMIT 1
			) e
			WHERE p.topic_id = t.id AND e.published_at < now() - t.retention_seconds * interval '1 second'
		)`

// EventDedupExpire deletes up to limit event ids whose window has ended.
func EventDedupExpire(ctx context.Context, db DBTX, limit int) (int64, error) {
	// The oldest ids by the expiry index, each deleted by its ctid in a
	// statement of its own (see ferry.event_dedup_delete).
	var n int64
	err := db.QueryRow(ctx, `/* ferry:event_dedup_expire */
		SELECT count(ferry.event_dedup_delete(ctid, expires_at)) FROM (
			SELECT ctid, expires_at FROM ferry.event_dedup WHERE expires_at < now() ORDER BY expires_at LIMIT $1
		) old`, limit).Scan(&n)
	if err != nil {
		return 0, interpretError("event dedup expire", err)
	}
	return n, nil
}

// scanEvent reads the columns id, type, key, data, attributes, partition,
// offset, published_at.
func scanEvent(row pgx.CollectableRow) (Event, error) {
	var (
		e           Event
		data, attrs *string
	)
	err := row.Scan(&e.ID, &e.Type, &e.Key, &data, &attrs, &e.Partition, &e.Offset, &e.PublishedAt)
	if data != nil {
		e.Data = []byte(*data)
	}
	if attrs != nil {
		e.Attributes = []byte(*attrs)
	}
	return e, err
}
