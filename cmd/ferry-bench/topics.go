package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-mq/ferry/store"
)

// Scenario 8: publishing to a topic, raw SQL against Ferry over HTTP, with
// the offset invariant (dense, commit-ordered offsets per partition)
// checked after every round.

const (
	// topicPartitions is the partition count of the bench topics.
	topicPartitions = 4
	// eventType is the type of every event both sides publish.
	eventType = "order.created"
	// keySpace is how many distinct keys events are drawn from, and
	// keyPool how many of them the load cycles through.
	keySpace, keyPool = 1_000_000, 16_384
)

// rawPublishOne is what a correct publisher does for one event, in one
// autocommit statement (one transaction): bump the partition's next
// offset, which locks its row until the commit, and append the event at
// the offset it had. Offsets of a partition are thus assigned one
// transaction at a time, densely and in commit order.
const rawPublishOne = `
	WITH o AS (
		UPDATE ferry.topic_partitions SET next_offset = next_offset + 1
		WHERE topic_id = $1 AND partition = $2
		RETURNING next_offset - 1 AS off
	)
	INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, data, published_at)
	SELECT $1, $2, off, $3, $4, $5, $6::jsonb, clock_timestamp() FROM o`

// rawBumpPartition reserves $3 offsets of a partition (and locks its row
// until the commit).
const rawBumpPartition = `
	UPDATE ferry.topic_partitions SET next_offset = next_offset + $3
	WHERE topic_id = $1 AND partition = $2`

// rawAppendEvents appends a batch whose offsets rawBumpPartition reserved
// earlier in the same transaction: an event back places from the end of
// its partition's share lands at next_offset - back.
const rawAppendEvents = `
	INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, data, published_at)
	SELECT $1, t.partition, p.next_offset - t.back, t.id, $2, t.key, t.data::jsonb, clock_timestamp()
	FROM unnest($3::int[], $4::bigint[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS t(partition, back, id, key, data, ord)
	JOIN ferry.topic_partitions p ON p.topic_id = $1 AND p.partition = t.partition
	ORDER BY t.ord`

// rawEvents are a batch of keyed events laid out as rawAppendEvents and
// rawFanoutAppend take them: sorted by partition, each with the ordinal
// back from the end of its partition's share (its offset is the bumped
// next_offset minus back) and an event id made in Go.
type rawEvents struct {
	counts     [topicPartitions]int // events per partition
	partitions []int32
	back       []int64
	ids, keys  []string
}

// rawEventsOf lays out one event per key.
func rawEventsOf(keys []string) rawEvents {
	var e rawEvents
	parts := make([]int, len(keys))
	for i, k := range keys {
		parts[i] = store.PartitionForKey(k, topicPartitions)
		e.counts[parts[i]]++
	}
	var next [topicPartitions]int // where a partition's events start in the sorted arrays
	for p := 1; p < topicPartitions; p++ {
		next[p] = next[p-1] + e.counts[p-1]
	}
	e.partitions, e.back = make([]int32, len(keys)), make([]int64, len(keys))
	e.ids, e.keys = make([]string, len(keys)), make([]string, len(keys))
	var taken [topicPartitions]int
	for i, k := range keys {
		p := parts[i]
		j := next[p] + taken[p]
		taken[p]++
		e.partitions[j], e.back[j], e.ids[j], e.keys[j] = int32(p), int64(e.counts[p]-taken[p]+1), store.NewEventID(), k
	}
	return e
}

// bumps is a batch that starts with an rawBumpPartition of each partition
// the events touch, in partition order (so that concurrent batches never
// deadlock).
func (e rawEvents) bumps(topicID int64) *pgx.Batch {
	batch := &pgx.Batch{}
	for p, n := range e.counts {
		if n > 0 {
			batch.Queue(rawBumpPartition, topicID, p, n)
		}
	}
	return batch
}

// rawPublishBatch publishes one event per key in one transaction (a pgx
// batch is one round trip and one implicit transaction): it locks and
// bumps the partitions the batch touches in partition order, then inserts
// the events, ordered by partition and offset, with offsets computed from
// the bumped counters.
func rawPublishBatch(ctx context.Context, b *Bench, topicID int64, keys, data []string) error {
	e := rawEventsOf(keys)
	batch := e.bumps(topicID)
	batch.Queue(rawAppendEvents, topicID, eventType, e.partitions, e.back, e.ids, e.keys, data)
	return b.raw.SendBatch(ctx, batch).Close()
}

// eventKeys is the bench's pool of event keys, drawn (with a fixed seed)
// from keySpace values: customer ids, as an order stream would have.
func eventKeys() []string {
	r := rand.New(rand.NewPCG(8, 8))
	keys := make([]string, keyPool)
	for i := range keys {
		keys[i] = fmt.Sprintf("cus_%07d", r.IntN(keySpace))
	}
	return keys
}

// createTopic creates a topic through the API and returns its id.
func (b *Bench) createTopic(ctx context.Context, name string) (int64, error) {
	if err := b.client.CreateTopic(ctx, name, topicPartitions); err != nil {
		return 0, err
	}
	var id int64
	err := b.raw.QueryRow(ctx, `SELECT id FROM ferry.topics WHERE name = $1`, name).Scan(&id)
	return id, err
}

// resetTopics empties the event tables, rewinds every partition to offset
// 0 (topics stay) and checkpoints.
func (b *Bench) resetTopics(ctx context.Context) error {
	return b.resetTopicTables(ctx, `TRUNCATE ferry.events, ferry.event_dedup`)
}

// resetTopicTables runs truncate, rewinds every partition to offset 0,
// vacuums the partitions and checkpoints.
func (b *Bench) resetTopicTables(ctx context.Context, truncate string) error {
	if _, err := b.raw.Exec(ctx, truncate); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	if _, err := b.raw.Exec(ctx, `UPDATE ferry.topic_partitions SET next_offset = 0`); err != nil {
		return fmt.Errorf("rewind partitions: %w", err)
	}
	if _, err := b.raw.Exec(ctx, `VACUUM ferry.topic_partitions`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return b.checkpoint(ctx)
}

// densityError is a broken offset invariant: fatal for the whole run.
type densityError struct{ msg string }

func (e *densityError) Error() string { return "offset invariant violated: " + e.msg }

// densityCheck tallies the rounds whose offsets were checked.
type densityCheck struct {
	rounds, events int64
}

func (d densityCheck) String() string {
	return fmt.Sprintf("dense in all %d rounds (%s events)", d.rounds, fmtInt(d.events))
}

// checkDensity verifies, for every partition of the topic, that its
// events' offsets are exactly 0 .. max (count = max + 1: offsets are
// unique, so none is missing) and that the partition's next offset is
// max + 1 (no offset reserved without its event). It returns the events
// counted.
func (b *Bench) checkDensity(ctx context.Context, what string, topicID int64) (int64, error) {
	rows, err := b.raw.Query(ctx, `
		SELECT p.partition, p.next_offset, count(e."offset"), coalesce(min(e."offset"), 0), coalesce(max(e."offset"), -1)
		FROM ferry.topic_partitions p
		LEFT JOIN ferry.events e ON e.topic_id = p.topic_id AND e.partition = p.partition
		WHERE p.topic_id = $1
		GROUP BY p.partition, p.next_offset ORDER BY p.partition`, topicID)
	if err != nil {
		return 0, fmt.Errorf("density check: %w", err)
	}
	defer rows.Close()
	var (
		total, parts int64
		bad          []string
	)
	for rows.Next() {
		var (
			partition                  int
			next, count, lowest, upper int64
		)
		if err := rows.Scan(&partition, &next, &count, &lowest, &upper); err != nil {
			return 0, err
		}
		parts++
		total += count
		if count != upper+1 || lowest != 0 || next != upper+1 {
			bad = append(bad, fmt.Sprintf("partition %d has %d events at offsets %d..%d, next_offset %d",
				partition, count, lowest, upper, next))
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if parts != topicPartitions {
		bad = append(bad, fmt.Sprintf("the topic has %d partitions, not %d", parts, topicPartitions))
	}
	if len(bad) > 0 {
		err := &densityError{what + ": " + strings.Join(bad, "; ")}
		progress("  %v", err)
		return 0, err
	}
	return total, nil
}

// publishRows are the headline rows of a publish comparison: there is no
// target, only the side-by-side figures.
func publishRows(metric string, raw, ferry Phase, pairs []float64) []Row {
	rows := throughputRows(metric, raw, ferry, pairs, 0)
	rows[0].Raw, rows[0].Ferry = fmtRateOf(raw.Rate(), events), fmtRateOf(ferry.Rate(), events)
	rows[0].Target, rows[0].Pass = "—", nil
	return rows
}

func (b *Bench) topicPublish(ctx context.Context) (*Section, error) {
	const (
		singleClients       = 32
		batch, batchClients = 500, 8
	)
	type topic struct {
		name string
		id   int64
	}
	topics := map[string]*topic{}
	for _, name := range []string{"bench-publish-raw", "bench-publish-ferry", "bench-publish-batch-raw", "bench-publish-batch-ferry"} {
		id, err := b.createTopic(ctx, name)
		if err != nil {
			return nil, err
		}
		topics[name] = &topic{name, id}
	}
	if err := warmPool(ctx, b.raw, singleClients); err != nil {
		return nil, err
	}

	keys := eventKeys()
	// Single publishes: worker w's i-th event has key keys[(w*stride+i) %
	// len(keys)] on both sides.
	const stride = keyPool / singleClients
	singleReqs := make([][]byte, len(keys))
	for i, k := range keys {
		singleReqs[i] = PublishRequest([]string{k})
	}
	// Batches: worker w's i-th batch is batches[(w*batchStride+i) %
	// len(batches)] on both sides.
	const nBatches = keyPool / batch
	const batchStride = nBatches / batchClients
	batchKeys := make([][]string, nBatches)
	batchReqs := make([][]byte, nBatches)
	for i := range batchKeys {
		batchKeys[i] = keys[i*batch : (i+1)*batch]
		batchReqs[i] = PublishRequest(batchKeys[i])
	}
	data := bodies(batch)

	density := map[side]*densityCheck{rawSide: {}, ferrySide: {}}
	// measure runs one side of one part of the scenario and checks the
	// offsets it left behind.
	measure := func(s side, name string, d time.Duration, workers int, op func(worker int, i int64) (int, error)) (Phase, error) {
		counter := make([]int64, workers) // each worker touches its own
		p, err := b.runLoad(ctx, name, workers, d, func(ctx context.Context, w int) (int, error) {
			i := counter[w]
			counter[w]++
			return op(w, i)
		})
		if err != nil {
			return p, err
		}
		t := topics[name]
		n, err := b.checkDensity(ctx, fmt.Sprintf("%s, topic %s", s, name), t.id)
		if err != nil {
			return p, err
		}
		density[s].rounds++
		density[s].events += n
		return p, nil
	}

	progress("  single-event publish, %d clients", singleClients)
	sRaw, sFerry, sPairs, err := b.alternate(ctx, b.opts.Duration,
		func(side) error { return b.resetTopics(ctx) },
		func(s side, d time.Duration) (Phase, error) {
			if s == rawSide {
				id := topics["bench-publish-raw"].id
				return measure(s, "bench-publish-raw", d, singleClients, func(w int, i int64) (int, error) {
					k := keys[(int64(w*stride)+i)%int64(len(keys))]
					_, err := b.raw.Exec(ctx, rawPublishOne, id, store.PartitionForKey(k, topicPartitions), store.NewEventID(), eventType, k, body)
					return 1, err
				})
			}
			return measure(s, "bench-publish-ferry", d, singleClients, func(w int, i int64) (int, error) {
				return 1, b.client.Publish(ctx, "bench-publish-ferry", singleReqs[(int64(w*stride)+i)%int64(len(keys))])
			})
		})
	if err != nil {
		return nil, fmt.Errorf("single-event publish: %w", err)
	}

	progress("  batch publish (%d), %d clients", batch, batchClients)
	bRaw, bFerry, bPairs, err := b.alternate(ctx, b.opts.Duration,
		func(side) error { return b.resetTopics(ctx) },
		func(s side, d time.Duration) (Phase, error) {
			if s == rawSide {
				id := topics["bench-publish-batch-raw"].id
				return measure(s, "bench-publish-batch-raw", d, batchClients, func(w int, i int64) (int, error) {
					return batch, rawPublishBatch(ctx, b, id, batchKeys[(int64(w*batchStride)+i)%nBatches], data)
				})
			}
			return measure(s, "bench-publish-batch-ferry", d, batchClients, func(w int, i int64) (int, error) {
				return batch, b.client.Publish(ctx, "bench-publish-batch-ferry", batchReqs[(int64(w*batchStride)+i)%nBatches])
			})
		})
	if err != nil {
		return nil, fmt.Errorf("batch publish: %w", err)
	}

	perXact := func(p Phase) string {
		if p.WriteXacts == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", float64(p.Messages)/float64(p.WriteXacts))
	}
	prefix := func(what string, rows []Row) []Row {
		for i := range rows {
			rows[i].Metric = what + ": " + rows[i].Metric
		}
		return rows
	}
	var rows []Row
	rows = append(rows, prefix("single event", publishRows("publish throughput", sRaw, sFerry, sPairs))...)
	rows = append(rows, prefix(fmt.Sprintf("batch of %d", batch), publishRows("publish throughput", bRaw, bFerry, bPairs))...)
	single := latencyRows("request latency", Summarize(sRaw.Latencies), Summarize(sFerry.Latencies))
	single = append(single, evidenceRowsOf(sRaw, sFerry, events)...)
	single = append(single, Row{Metric: "events per write transaction", Raw: perXact(sRaw), Ferry: perXact(sFerry)})
	rows = append(rows, prefix("single event", single)...)
	batched := latencyRows("request latency", Summarize(bRaw.Latencies), Summarize(bFerry.Latencies))
	batched = append(batched, evidenceRowsOf(bRaw, bFerry, events)...)
	batched = append(batched, Row{Metric: "events per write transaction", Raw: perXact(bRaw), Ferry: perXact(bFerry)})
	rows = append(rows, prefix(fmt.Sprintf("batch of %d", batch), batched)...)
	rows = append(rows, Row{Metric: "offsets dense after every round (count = max + 1 = next_offset, per partition)",
		Raw: density[rawSide].String(), Ferry: density[ferrySide].String()})

	return &Section{
		Rows: rows,
		How: fmt.Sprintf("Each side publishes to its own %d-partition topic created through the API (`PUT /v1/topics/{t}` `{\"partitions\":%d}`), "+
			"keyed events (keys cycle through %s drawn from %s customer ids, the same sequence on both sides; partition = FNV-1a of the key mod %d, "+
			"`store.PartitionForKey`), type `%s`, the bench body as data, no event id from the client. "+
			"Ferry also records every event id (`ferry.event_dedup`: one insert, then an update with the offset, per event) for deduplication; "+
			"raw SQL, as in the other scenarios, skips what makes Ferry a broker and writes only the partition counters and the events. "+
			"**Single event:** %d concurrent clients, one event per request, for %s per side. Raw: what a correct publisher must do per event to keep "+
			"offsets dense and in commit order, in one autocommit statement (one transaction): `WITH o AS (UPDATE ferry.topic_partitions SET next_offset = next_offset + 1 "+
			"WHERE topic_id = $1 AND partition = $2 RETURNING next_offset - 1) INSERT INTO ferry.events (...) SELECT ... FROM o`, the event id made in Go; "+
			"the partition row stays locked until the commit, so publishes to one partition commit one after another. "+
			"Ferry: `POST /v1/topics/{t}/events` with one event; Ferry's publisher merges the publishes that arrive while a transaction commits "+
			"into the next one (group commit). "+
			"**Batch:** %d concurrent clients, batches of %d events, for %s per side. Raw: one pgx batch (one round trip, one implicit transaction) "+
			"of an `UPDATE ... SET next_offset = next_offset + n` per partition the batch touches, in partition order (no deadlocks between batches), "+
			"then one `INSERT ... SELECT FROM unnest(...)` of the events sorted by partition, offsets computed from the bumped counters. "+
			"Ferry: `POST /v1/topics/{t}/events` with the %d events (request bodies encoded once). There is no target: publishing has to "+
			"serialise on the partition locks either way, and the figures only compare Ferry with the hand-written equivalent. "+
			"Write transactions are transaction ids assigned during the window (`pg_current_snapshot()`), as in scenarios 1-3. "+
			"After every round, the bench checks each partition: `count(*) = max(offset) + 1 = next_offset` and min 0; a violation fails the run. "+
			b.roundsNote("TRUNCATE of ferry.events and ferry.event_dedup, next_offset reset to 0, VACUUM of ferry.topic_partitions, CHECKPOINT"),
			topicPartitions, topicPartitions, fmtInt(keyPool), fmtInt(keySpace), topicPartitions, eventType,
			singleClients, b.opts.Duration, batchClients, batch, b.opts.Duration, batch),
	}, nil
}
