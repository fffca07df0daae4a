package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// publishBatch is the write of one publish: the events given (each with
// its id and partition chosen once, so every attempt writes the same) and,
// per attempt, what its two round trips read. Its phases, in order:
//
//   - claimDedup queues the first round trip: claim the ids, read where
//     each claimed id landed, read the subscriptions to fan out to;
//   - plan splits the events into duplicates and fresh ones and matches
//     the fresh ones against the subscriptions;
//   - lockPartitions and appendAndFanOut queue the second: lock the
//     partitions, check the subscriptions, lock the groups, append the
//     events with their deliveries;
//   - answer checks what the second round trip did and says where each
//     event landed.
//
// Each queued statement reads its own result (pgx's QueuedQuery
// callbacks), so results are read by statement, never by position.
type publishBatch struct {
	topic   Topic
	filters *filterCache // the caller's, or nil
	relayed bool         // the relay's: the ids are claimed already, pending
	// claimWait, in a transaction of Ferry's own (claimWaitAlone or
	// claimWaitMerged), bounds the wait for an id claimed by another
	// transaction (see claimDedup).
	claimWait string
	ids       []string // per event given: its id
	repeatOf  []int    // per event given: the earlier one with its id, or -1
	rows      []publishRow

	// Per attempt, from the first round trip (claimDedup)…
	claims      map[string]PublishResult // id → where it landed; offset -1: claimed now
	subsVersion int64
	subs        []fanoutSub
	// …from plan…
	results []PublishResult // per event given
	fresh   []publishRow    // the rows claimed now, appended
	touched []int32         // their partitions, sorted, once each
	fan     fanout
	// …and from the second round trip.
	locked, appended int
}

// newPublishBatch gives every event its id (a new one when it has none)
// and every event of a new id its partition: by key, or from spread (see
// Spreader) when it has none. A repeated id is written once. Filters read
// are kept in filters (nil: none kept).
func newPublishBatch(t Topic, events []PublishEvent, spread *Spreader, filters *filterCache) *publishBatch {
	p := &publishBatch{topic: t, filters: filters, ids: make([]string, len(events)), repeatOf: make([]int, len(events))}
	firstOf := map[string]int{}
	keyless := 0
	for i, e := range events {
		p.repeatOf[i] = -1
		id := e.ID
		if id == "" {
			id = NewEventID()
		}
		p.ids[i] = id
		if j, ok := firstOf[id]; ok {
			p.repeatOf[i] = j
			continue
		}
		firstOf[id] = i
		if e.Key == nil {
			keyless++
		}
		p.rows = append(p.rows, publishRow{at: i, id: id, typ: e.Type, key: e.Key, data: rawPtr(e.Data), attrs: rawPtr(e.Attributes), ce: rawPtr(e.CE)})
	}
	next := spread.take(t.ID, keyless)
	for k, e := range p.rows {
		if e.key != nil {
			p.rows[k].partition = int32(PartitionForKey(*e.key, t.Partitions))
		} else {
			p.rows[k].partition = int32(next % uint64(t.Partitions))
			next++
		}
	}
	return p
}

// write runs the publish on db in two round trips and says where each
// event landed and what to wake. With begin and commit, db is a
// connection outside any transaction, and the publish is a transaction of
// its own: BEGIN travels with the first round trip and COMMIT with the
// second. Without either, db is the caller's transaction, and the publish
// commits with it. The relay begins its transaction before (it takes the
// pending events in it) and commits with the second round trip.
func (p *publishBatch) write(ctx context.Context, db DBTX, begin, commit bool) (PublishOutcome, error) {
	b := &pgx.Batch{}
	if begin {
		b.Queue(`BEGIN`)
	}
	p.claimDedup(b, begin)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return PublishOutcome{}, err
	}
	p.plan()
	b = &pgx.Batch{}
	p.lockPartitions(b)
	// The fan-out's probes of ordered subscriptions' groups, around the
	// append only (db may be the caller's transaction): by the group index,
	// never a bitmap scan of a partition the planner believes empty
	// (package doc, # Held snapshots).
	grouped := len(p.fan.lockQueues) > 0
	if grouped {
		b.Queue(`/* ferry:ring_planner_publish */ SELECT set_config('ferry.saved_bitmapscan', current_setting('enable_bitmapscan'), true),
			set_config('enable_bitmapscan', 'off', true)`)
	}
	p.appendAndFanOut(b)
	if grouped {
		b.Queue(`/* ferry:ring_planner_publish_end */ SELECT set_config('enable_bitmapscan', current_setting('ferry.saved_bitmapscan'), true)`)
	}
	if commit {
		b.Queue(`COMMIT`)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return PublishOutcome{}, err
	}
	return p.answer()
}

// claimDedup queues the first round trip: claim the ids in
// ferry.event_dedup (in id order, so two publishes of the same ids never
// wait on each other crosswise), read every id's row back, and read the
// topic's subscriptions with their version. The relay's batch claims
// nothing new: its ids were claimed pending by ferry.publish, and it
// turns those claims into this transaction's own (see relayClaim). With
// bounded, a wait for an id another transaction claimed is cut after
// p.claimWait (package doc, # Locks).
func (p *publishBatch) claimDedup(b *pgx.Batch, bounded bool) {
	ids := make([]string, len(p.rows))
	parts := make([]int32, len(p.rows))
	for k, r := range p.rows {
		ids[k], parts[k] = r.id, r.partition
	}
	t := p.topic
	switch {
	case p.relayed:
		relayClaim(b, t, ids)
	case bounded:
		b.Queue(`/* ferry:event_dedup_claim_wait */ SET LOCAL lock_timeout = '` + p.claimWait + `'`)
		restClaim(b, t, ids, parts)
		b.Queue(`/* ferry:event_dedup_claim_wait_end */ SET LOCAL lock_timeout TO DEFAULT`)
	default:
		restClaim(b, t, ids, parts)
	}
	// Fresh claims read back as offset -1 (this transaction's own rows);
	// duplicates as the committed original, or as PendingOffset when the
	// original is an event of the SQL API not appended yet.
	// One probe per id, by the whole key: with topic_id = $1 AND event_id
	// = ANY($2) the planner may descend on topic_id alone and walk every
	// id the topic remembers.
	b.Queue(`/* ferry:event_dedup_read */
		SELECT d.event_id, d.partition, d."offset" FROM unnest($2::text[]) AS i(id)
		CROSS JOIN LATERAL (
			SELECT event_id, partition, "offset" FROM ferry.event_dedup WHERE topic_id = $1 AND event_id = i.id LIMIT 1
		) d`, t.ID, ids).Query(p.readClaims)
	// The subscriptions to fan out to, and the version they are at: the
	// second round trip checks, under the partition locks, that it has
	// not changed since (see lockTopicForSubscriptions).
	b.Queue(`/* ferry:topic_subscriptions_read */
		SELECT t.subs_version, q.id, q.filter::text, q.ordered
		FROM ferry.topics t LEFT JOIN ferry.queues q ON q.topic_id = t.id
		WHERE t.id = $1 ORDER BY q.id`, t.ID).Query(p.readSubs)
}

// How long a publish of Ferry's own transaction waits for another
// transaction's claim of one of its ids: a REST publish's claim is held
// for milliseconds (longer on a loaded machine); an application's open
// transaction may hold one for minutes. EventPublish, whose transaction
// holds nobody else up, waits as a send waits for a lock
// (sendLockTimeout); the Publisher's transactions, which hold the
// requests merged into them and a worker, wait claimWaitMerged at a time.
const (
	claimWaitAlone  = sendLockTimeout
	claimWaitMerged = "250ms"
)

// restClaim queues the claim of a publish through REST (or Go): an id
// new in the window is claimed with offset -1, and an id whose window
// ended is taken over; a pending claim (PendingOffset) never ends before
// the relay appends its event (its expiry is infinity until then).
func restClaim(b *pgx.Batch, t Topic, ids []string, parts []int32) {
	b.Queue(`/* ferry:event_dedup_claim */
		INSERT INTO ferry.event_dedup AS d (topic_id, event_id, partition, "offset", expires_at)
		SELECT $1, id, p, -1, now() + make_interval(secs => $4)
		FROM unnest($2::text[], $3::int[]) AS t(id, p) ORDER BY id
		ON CONFLICT (topic_id, event_id) DO UPDATE
			SET partition = excluded.partition, "offset" = -1, expires_at = excluded.expires_at
			WHERE d.expires_at <= now()`, t.ID, ids, parts, t.DedupWindowSeconds)
}

// relayClaim queues the relay's claim: the pending claims of the ids
// (offset PendingOffset, made by ferry.publish in a transaction that has
// committed) become this transaction's (offset -1), and their dedup
// window starts now. An id whose claim is not pending any more (it
// cannot be, but if it were) reads back as a duplicate and is not
// appended twice. One probe per id by the whole key, then by ctid.
func relayClaim(b *pgx.Batch, t Topic, ids []string) {
	b.Queue(`/* ferry:event_dedup_relay_claim */
		UPDATE ferry.event_dedup d SET "offset" = -1, expires_at = now() + make_interval(secs => $3)
		FROM unnest($2::text[]) AS i(id) CROSS JOIN LATERAL (
			SELECT x.ctid FROM ferry.event_dedup x WHERE x.topic_id = $1 AND x.event_id = i.id LIMIT 1
		) x
		WHERE d.ctid = x.ctid AND d."offset" = `+pendingOffsetSQL, t.ID, ids, t.DedupWindowSeconds)
}

// readClaims reads ferry:event_dedup_read.
func (p *publishBatch) readClaims(rows pgx.Rows) error {
	p.claims = make(map[string]PublishResult, len(p.rows))
	for rows.Next() {
		var r PublishResult
		if err := rows.Scan(&r.ID, &r.Partition, &r.Offset); err != nil {
			return err
		}
		p.claims[r.ID] = r
	}
	return rows.Err()
}

// readSubs reads ferry:topic_subscriptions_read.
func (p *publishBatch) readSubs(rows pgx.Rows) error {
	p.subsVersion, p.subs = 0, nil
	for rows.Next() {
		var (
			id      *int64
			filter  *string
			ordered *bool
		)
		if err := rows.Scan(&p.subsVersion, &id, &filter, &ordered); err != nil {
			return err
		}
		if id != nil {
			p.subs = append(p.subs, fanoutSub{id: *id, filter: p.filters.get(filter), ordered: *ordered})
		}
	}
	return rows.Err()
}

// plan splits the rows by what the first round trip read: an id whose
// row has an offset is a duplicate and answers the original's place; the
// others are appended, to the partitions touched, with their deliveries.
func (p *publishBatch) plan() {
	p.results = make([]PublishResult, len(p.ids))
	p.fresh = p.fresh[:0]
	for _, r := range p.rows {
		// An id without a row (only the relay's can lack one) is not
		// appended either.
		if c, ok := p.claims[r.id]; !ok || c.Offset != -1 {
			p.results[r.at] = PublishResult{ID: r.id, Partition: c.Partition, Offset: c.Offset, Duplicate: true}
			continue
		}
		p.results[r.at] = PublishResult{ID: r.id, Partition: int(r.partition)}
		p.fresh = append(p.fresh, r)
	}
	p.touched = []int32{} // never nil: NULL would not compare
	for _, r := range p.fresh {
		p.touched = append(p.touched, r.partition)
	}
	slices.Sort(p.touched)
	p.touched = slices.Compact(p.touched)
	p.fan = planFanout(p.subs, p.fresh, p.topic.CloudSource())
}

// lockPartitions queues the start of the second round trip: lock the
// partitions touched (in partition order), check that the subscriptions
// are still the ones read, and take the advisory locks of the ordered
// subscriptions' groups that get deliveries.
func (p *publishBatch) lockPartitions(b *pgx.Batch) {
	t := p.topic
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
		) locked`, t.ID, p.touched).QueryRow(func(row pgx.Row) error { return row.Scan(&p.locked) })
	b.Queue(`/* ferry:topic_subscriptions_check */
		SELECT CASE WHEN subs_version = $2 THEN 0 ELSE ferry.raise_retry('subscriptions changed') END
		FROM ferry.topics WHERE id = $1`, t.ID, p.subsVersion)
	if len(p.fan.lockQueues) > 0 {
		b.Queue(`/* ferry:event_group_locks */
			SELECT count(pg_advisory_xact_lock(k)) FROM (
				SELECT DISTINCT ferry.group_lock_key(q, g) AS k FROM unnest($1::bigint[], $2::text[]) AS l(q, g) ORDER BY k
			) locks`, p.fan.lockQueues, p.fan.lockGroups)
	}
}

// publishColumns is the fresh rows as the append statement takes them:
// one array per column.
type publishColumns struct {
	ids, types        []string
	keys, data, attrs []*string
	ce                []*string
	parts             []int32
}

func columnsOf(rows []publishRow) publishColumns {
	if len(rows) == 0 {
		return publishColumns{} // NULL arrays, as unnest reads them: no rows
	}
	c := publishColumns{
		ids: make([]string, len(rows)), types: make([]string, len(rows)),
		keys: make([]*string, len(rows)), data: make([]*string, len(rows)), attrs: make([]*string, len(rows)),
		ce: make([]*string, len(rows)), parts: make([]int32, len(rows)),
	}
	for k, r := range rows {
		c.ids[k], c.types[k], c.keys[k], c.data[k], c.attrs[k], c.parts[k] = r.id, r.typ, r.key, r.data, r.attrs, r.partition
		c.ce[k] = r.ce
	}
	return c
}

// appendAndFanOut queues the append: the partitions' next offsets taken,
// the fresh events appended, their dedup rows pointed at them and their
// deliveries written, all in one statement that reads back each event's
// offset.
func (p *publishBatch) appendAndFanOut(b *pgx.Batch) {
	c := columnsOf(p.fresh)
	b.Queue(`/* ferry:event_append */
		WITH input AS (
			SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[], $12::text[])
				WITH ORDINALITY AS t(id, type, key, partition, data, attributes, ce, ord)
		),
		counts AS (SELECT partition, count(*) AS n FROM input GROUP BY partition),
		-- The partitions' next offsets, read after the lock statement
		-- (this statement's snapshot sees every event of the publishes
		-- that held them before); the rows are not updated.
		bumped AS (
			SELECT p.partition, `+partitionNextSQL("p")+` AS base
			FROM counts c JOIN ferry.topic_partitions p ON p.topic_id = $1 AND p.partition = c.partition
		),
		placed AS MATERIALIZED (
			SELECT i.id, i.type, i.key, i.partition, i.ord, i.data::jsonb AS data, i.attributes::jsonb AS attributes,
				i.ce::jsonb AS ce,
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
				THEN (ferry.event_json(p.id, p.type, p.key, p.data, p.attributes, p.partition, p.off, p.at)::jsonb
					|| `+ceBodySQL("p.ce", "p.at", "$13::text")+`)::json END AS body
			FROM placed p
		),
		appended AS (
			INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, attributes, data, ce, published_at)
			SELECT $1, partition, off, id, type, key, attributes, data, ce, at
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
		SELECT ord, off FROM numbered`, p.topic.ID, c.ids, c.types, c.keys, c.parts, c.data, c.attrs,
		p.fan.queues, p.fan.events, p.fan.groups, p.fan.matched(len(p.fresh)), c.ce, p.topic.CloudSource()).Query(p.readOffsets)
}

// readOffsets reads ferry:event_append: the offset of each fresh event,
// by its 1-based position among them.
func (p *publishBatch) readOffsets(rows pgx.Rows) error {
	p.appended = 0
	for rows.Next() {
		var (
			ord int
			off int64
		)
		if err := rows.Scan(&ord, &off); err != nil {
			return err
		}
		p.results[p.fresh[ord-1].at].Offset = off
		p.appended++
	}
	return rows.Err()
}

// answer checks that the second round trip locked every partition and
// appended every fresh event, and says where each event landed (a
// repeated id where its first event did, as a duplicate) and what to wake.
func (p *publishBatch) answer() (PublishOutcome, error) {
	if p.locked != len(p.touched) || p.appended != len(p.fresh) {
		return PublishOutcome{}, fmt.Errorf("event publish: %d of %d partitions, %d of %d events", p.locked, len(p.touched), p.appended, len(p.fresh))
	}
	for i, j := range p.repeatOf {
		if j >= 0 {
			first := p.results[j]
			p.results[i] = PublishResult{ID: first.ID, Partition: first.Partition, Offset: first.Offset, Duplicate: true}
		}
	}
	subs := p.fan.fed()
	return PublishOutcome{
		Results:       p.results,
		Subscriptions: subs,
		WakeKeys:      append([]int64{TopicWakeKey(p.topic.ID)}, subs...),
	}, nil
}

func rawPtr(r json.RawMessage) *string {
	if r == nil {
		return nil
	}
	s := string(r)
	return &s
}

// PublishEvent is one event of a publish batch, already validated.
type PublishEvent struct {
	ID         string // "" = generate one
	Type       string
	Key        *string
	Data       json.RawMessage // nil = no data
	Attributes json.RawMessage // a JSON object, or nil
	// CE is the JSON encoding of the event's CloudAttrs when it was
	// published as a CloudEvent; nil for plain JSON.
	CE json.RawMessage
}

// PublishResult is where one published event landed.
type PublishResult struct {
	ID        string
	Partition int
	// Offset is PendingOffset for a duplicate of an event of the SQL API
	// that the relay has not appended yet (see EventAwaitAppended).
	Offset    int64
	Duplicate bool
}

// PublishParams is a publish: events for a topic.
type PublishParams struct {
	Topic  Topic
	Events []PublishEvent
	// Spreader picks the partitions of keyless events. The caller owns it
	// (a Publisher has one); nil spreads each publish's keyless events
	// round-robin from a random partition, as even over many publishes
	// but not turn by turn.
	Spreader *Spreader
}

// PublishOutcome is what a publish wrote: where each event landed, and
// whom to wake once its transaction has committed.
type PublishOutcome struct {
	// Results says where each event landed, in the order given.
	Results []PublishResult
	// Subscriptions lists the subscriptions that got deliveries, once
	// each, in id order: their push workers are to be kicked.
	Subscriptions []int64
	// WakeKeys are the Notifier keys to wake: the topic's (TopicWakeKey),
	// for its event readers and consumer groups, then Subscriptions (a
	// subscription is a queue: its key is its id), for their receivers.
	WakeKeys []int64
}

// EventPublish appends events to the topic in a transaction of its own
// and answers, in order, where each landed, and the subscriptions that
// got deliveries. An id seen on the topic within its dedup window (or
// earlier in the batch) is a duplicate: it answers the original's
// partition and offset and appends nothing. Keyless events are spread
// from a random partition (see PublishParams.Spreader); a [Publisher]
// spreads them round-robin per topic. It is one transaction of two round
// trips ([EventPublishTx]), run again up to 10 times when it fails only
// through concurrency (a subscription change, a deadlock).
func EventPublish(ctx context.Context, pool *pgxpool.Pool, t Topic, events []PublishEvent) ([]PublishResult, []int64, error) {
	out, err := eventPublish(ctx, pool, PublishParams{Topic: t, Events: events}, nil, claimWaitAlone)
	if err != nil {
		return nil, nil, err
	}
	return out.Results, out.Subscriptions, nil
}

// eventPublish is EventPublish with its parameters, for the Publisher,
// which keeps the subscriptions' parsed filters in filters (nil: parsed
// by each publish) and bounds the wait for an id claimed by another
// transaction by claimWait (see claimDedup).
func eventPublish(ctx context.Context, pool *pgxpool.Pool, p PublishParams, filters *filterCache, claimWait string) (PublishOutcome, error) {
	batch := newPublishBatch(p.Topic, p.Events, p.Spreader, filters)
	batch.claimWait = claimWait
	var out PublishOutcome
	// More attempts than other transactions: a publish also starts again
	// when a subscription of the topic changed meanwhile.
	err := retryN(ctx, 10, func() error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		out, err = batch.write(ctx, conn.Conn(), true, true)
		if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
			// Leave the connection clean; the pool drops it if this fails.
			_, _ = conn.Exec(context.Background(), "ROLLBACK")
		}
		return err
	})
	if err != nil {
		return PublishOutcome{}, interpretError("event publish", err)
	}
	return out, nil
}

// EventPublishTx appends p.Events to p.Topic in the caller's transaction
// tx, with their dedup claims, offsets and deliveries to every matching
// subscription; the results (as [EventPublish]'s) hold once tx commits.
//
//   - tx must be READ COMMITTED (the default).
//   - tx holds the topic's partition row locks until it ends: never
//     publish this way in a transaction that may stay open (the SQL API's
//     ferry.publish goes through the [Relay] instead); see "Locks" in the
//     package doc.
//   - It wakes no one: after commit, wake out.WakeKeys
//     ([Notifier.Published]) and kick the push of out.Subscriptions.
//   - An error wrapping [ErrBusy] aborted tx (a concurrent subscription
//     change, a deadlock): run the whole transaction again. [ErrNotFound]:
//     the topic is gone.
func EventPublishTx(ctx context.Context, tx pgx.Tx, p PublishParams) (PublishOutcome, error) {
	out, err := newPublishBatch(p.Topic, p.Events, p.Spreader, nil).write(ctx, tx, false, false)
	if err != nil {
		return PublishOutcome{}, interpretError("event publish", err)
	}
	return out, nil
}
