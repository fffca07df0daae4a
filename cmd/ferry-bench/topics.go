package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

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
// unique, so none is missing) and that the partition's stored
// next_offset is not beyond max + 1 (no offset reserved without its
// event; Ferry's publishes leave it as a floor, the raw side's keep it at
// max + 1). It returns the events counted.
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
		// next_offset is a floor (Ferry's publishes leave it; the raw
		// side's keep it at the end): above max + 1, offsets were taken
		// without their events.
		if count != upper+1 || lowest != 0 || next > upper+1 {
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

func (b *Bench) topicPublish(ctx context.Context) (*Section, error) {
	const (
		singleClients       = 32
		batch, batchClients = 500, 8
	)
	var topicIDs [2][2]int64 // [single or batch][side]
	prefixes := [2]string{"bench-publish", "bench-publish-batch"}
	for part, prefix := range prefixes {
		for _, s := range []side{rawSide, ferrySide} {
			id, err := b.createTopic(ctx, prefix+"-"+s.String())
			if err != nil {
				return nil, err
			}
			topicIDs[part][s] = id
		}
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

	var density [2]densityCheck
	// loads are one part of the scenario: before every round the topics
	// are reset, after it the offsets the round left behind are checked.
	loads := func(label string, part, clients int, raw, ferry func(ctx context.Context, w int, i int64) (int, error)) sideLoads {
		return sideLoads{label: label, clients: clients,
			prepare: func(side) error { return b.resetTopics(ctx) },
			check: func(s side) error {
				n, err := b.checkDensity(ctx, fmt.Sprintf("%s, topic %s-%s", s, prefixes[part], s), topicIDs[part][s])
				density[s].rounds++
				density[s].events += n
				return err
			},
			ops: [2]loadOp{numbered(clients, raw), numbered(clients, ferry)}}
	}

	progress("  single-event publish, %d clients", singleClients)
	sRaw, sFerry, sPairs, err := b.compare(ctx, loads("publish-single", 0, singleClients,
		func(ctx context.Context, w int, i int64) (int, error) {
			k := keys[(int64(w*stride)+i)%int64(len(keys))]
			_, err := b.raw.Exec(ctx, rawPublishOne, topicIDs[0][rawSide], store.PartitionForKey(k, topicPartitions), store.NewEventID(), eventType, k, body)
			return 1, err
		},
		func(ctx context.Context, w int, i int64) (int, error) {
			return 1, b.client.Publish(ctx, "bench-publish-ferry", singleReqs[(int64(w*stride)+i)%int64(len(keys))])
		}))
	if err != nil {
		return nil, fmt.Errorf("single-event publish: %w", err)
	}

	progress("  batch publish (%d), %d clients", batch, batchClients)
	bRaw, bFerry, bPairs, err := b.compare(ctx, loads("publish-batch", 1, batchClients,
		func(ctx context.Context, w int, i int64) (int, error) {
			return batch, rawPublishBatch(ctx, b, topicIDs[1][rawSide], batchKeys[(int64(w*batchStride)+i)%nBatches], data)
		},
		func(ctx context.Context, w int, i int64) (int, error) {
			return batch, b.client.Publish(ctx, "bench-publish-batch-ferry", batchReqs[(int64(w*batchStride)+i)%nBatches])
		}))
	if err != nil {
		return nil, fmt.Errorf("batch publish: %w", err)
	}
	return publishSection(sRaw, sFerry, bRaw, bFerry, sPairs, bPairs, density, singleClients, batch, batchClients, b.opts.Duration, b.roundsNote), nil
}
