package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ferry-mq/ferry/jobs"
)

// Scenario 9: topic fan-out and push delivery. Part 1 publishes batches to
// a topic with N pull subscriptions, Ferry over HTTP against the same rows
// written by raw SQL; part 2 measures publish → push-delivered latency at a
// fixed offered load against an in-process receiver; part 3 counts, from
// pg_stat_statements, the SQL statements the server ran per delivery
// during part 2.

const (
	// fanoutBatch is the events per publish request (and raw transaction)
	// and fanoutClients the concurrent publishers of part 1.
	fanoutBatch, fanoutClients = 100, 8
	// pushRate is part 2's offered load, events per second.
	pushRate = 200
	// pushMaxInFlight is the push subscription's max_in_flight (the
	// default) and pushTimeout its timeout_seconds (the default).
	pushMaxInFlight, pushTimeout = 10, 10
	// pushP50Target and pushP99Target are the latency targets,
	// stmtsPerDeliveryTarget its statements target (Convoy: ~32).
	pushP50Target, pushP99Target = 50 * time.Millisecond, 250 * time.Millisecond
	stmtsPerDeliveryTarget       = 5.0
)

// fanoutSubCounts are the subscription counts of part 1.
var fanoutSubCounts = []int{1, 10, 100}

// fanoutTimes are the measured time per side and subscription count in
// part 1, and part 2's publishing time.
func (b *Bench) fanoutTimes() (perSide, push time.Duration) {
	if b.opts.Quick {
		return time.Second, 2 * time.Second
	}
	return 4 * time.Second, 10 * time.Second
}

// rawFanoutAppend appends a batch whose offsets rawBumpPartition reserved
// earlier in the same transaction (as rawAppendEvents does) and writes one
// delivery per event and subscription ($8): the subscription's
// ferry.messages row, with the event as its body in the shape Ferry
// stores it.
const rawFanoutAppend = `
	WITH ev AS (
		INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, data, published_at)
		SELECT $1, t.partition, p.next_offset - t.back, t.id, $2, t.key, t.data::jsonb, clock_timestamp()
		FROM unnest($3::int[], $4::bigint[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS t(partition, back, id, key, data, ord)
		JOIN ferry.topic_partitions p ON p.topic_id = $1 AND p.partition = t.partition
		ORDER BY t.ord
		RETURNING partition, "offset", id, type, key, data, published_at
	)
	INSERT INTO ferry.messages (queue_id, id, visible_at, waiting, sent_at, event_id, body)
	SELECT s.queue_id, nextval('ferry.message_id_seq'), e.published_at, false, e.published_at, e.id,
		jsonb_build_object('id', e.id, 'type', e.type, 'key', e.key, 'data', e.data, 'attributes', '{}'::jsonb,
			'partition', e.partition, 'offset', e."offset",
			'published_at', to_char(e.published_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::json
	FROM ev e CROSS JOIN unnest($8::bigint[]) AS s(queue_id)`

// rawFanoutBatch publishes one event per key and its deliveries to subs in
// one transaction (one pgx batch, one round trip): the partition bumps in
// partition order, then rawFanoutAppend.
func rawFanoutBatch(ctx context.Context, b *Bench, topicID int64, subs []int64, keys, data []string) error {
	e := rawEventsOf(keys)
	batch := e.bumps(topicID)
	batch.Queue(rawFanoutAppend, topicID, eventType, e.partitions, e.back, e.ids, e.keys, data, subs)
	return b.raw.SendBatch(ctx, batch).Close()
}

// truncateFanout lists the tables in the order a publish locks them
// (event_dedup first), so that a TRUNCATE meeting a publish cut at the end
// of a window waits for it instead of deadlocking with it.
const truncateFanout = `TRUNCATE ferry.event_dedup, ferry.events, ferry.messages, ferry.queue_counts, ferry.dedup, ferry.dead_letters`

// resetFanout empties the message and event tables, rewinds every
// partition and checkpoints.
func (b *Bench) resetFanout(ctx context.Context) error {
	return b.resetTopicTables(ctx, truncateFanout)
}

// createSubscription creates a subscription through the API with the
// given request body and returns its queue id.
func (b *Bench) createSubscription(ctx context.Context, topic string, topicID int64, name, req string) (int64, error) {
	if err := b.client.CreateSubscription(ctx, topic, name, req); err != nil {
		return 0, err
	}
	var id int64
	err := b.raw.QueryRow(ctx, `SELECT id FROM ferry.queues WHERE topic_id = $1 AND name = $2`, topicID, name).Scan(&id)
	return id, err
}

// deleteTopic deletes a topic through the API (its subscriptions with it).
func (b *Bench) deleteTopic(ctx context.Context, name string) error {
	return b.client.DeleteTopic(ctx, name)
}

// fanoutTopic is one side's topic of part 1 and its subscriptions.
type fanoutTopic struct {
	name string
	id   int64
	subs []int64
}

// setupFanoutTopic creates a topic with n pull subscriptions (no filter).
func (b *Bench) setupFanoutTopic(ctx context.Context, name string, n int) (*fanoutTopic, error) {
	id, err := b.createTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	t := &fanoutTopic{name: name, id: id}
	for i := range n {
		sid, err := b.createSubscription(ctx, name, id, fmt.Sprintf("sub-%03d", i), `{}`)
		if err != nil {
			return nil, fmt.Errorf("subscription %d of %s: %w", i, name, err)
		}
		t.subs = append(t.subs, sid)
	}
	return t, nil
}

// checkFanout checks a topic after a window: dense offsets (as
// checkDensity does) and exactly one delivery per event and subscription.
// It returns the events counted.
//
// It reads everything in one statement (one snapshot): a Ferry publish
// whose request was cut at the end of the window may still commit.
func (b *Bench) checkFanout(ctx context.Context, s side, t *fanoutTopic) (int64, error) {
	var parts, n, bad, deliveries int64
	err := b.raw.QueryRow(ctx, `
		WITH p AS (
			SELECT p.partition, p.next_offset, count(e."offset") AS n,
				coalesce(min(e."offset"), 0) AS lo, coalesce(max(e."offset"), -1) AS hi
			FROM ferry.topic_partitions p
			LEFT JOIN ferry.events e ON e.topic_id = p.topic_id AND e.partition = p.partition
			WHERE p.topic_id = $1
			GROUP BY p.partition, p.next_offset
		)
		SELECT (SELECT count(*) FROM p), (SELECT coalesce(sum(n), 0)::bigint FROM p),
			(SELECT count(*) FROM p WHERE n <> hi + 1 OR lo <> 0 OR next_offset <> hi + 1),
			(SELECT coalesce(sum(messages), 0)::bigint FROM ferry.queue_counts WHERE queue_id = ANY($2))`,
		t.id, t.subs).Scan(&parts, &n, &bad, &deliveries)
	if err != nil {
		return 0, fmt.Errorf("fan-out check: %w", err)
	}
	if parts != topicPartitions || bad > 0 {
		err := &densityError{fmt.Sprintf("%s, topic %s: %d of %d partitions have offsets that are not dense from 0 to next_offset - 1",
			s, t.name, bad, parts)}
		progress("  %v", err)
		return 0, err
	}
	if want := n * int64(len(t.subs)); deliveries != want {
		return 0, fmt.Errorf("%s, topic %s: %d deliveries for %d events and %d subscriptions (want %d)",
			s, t.name, deliveries, n, len(t.subs), want)
	}
	return n, nil
}

// fanoutResult is part 1's outcome for one subscription count.
type fanoutResult struct {
	subs       int
	raw, ferry Phase
}

// measureFanout runs part 1 for n subscriptions: one window per side, each
// after resetFanout, raw first or Ferry first as rawFirst says. One long
// window rather than several short rounds: at N = 100 a transaction takes
// about a second, so per-round overhead (warm-up, requests in flight at the
// end, reset) would eat the time budget.
func (b *Bench) measureFanout(ctx context.Context, n int, perSide time.Duration, rawFirst bool, batchKeys [][]string, batchReqs [][]byte, checked *[2]int64) (fanoutResult, error) {
	res := fanoutResult{subs: n}
	topics := [2]*fanoutTopic{}
	var err error
	if topics[rawSide], err = b.setupFanoutTopic(ctx, fmt.Sprintf("bench-fanout-raw-%d", n), n); err != nil {
		return res, err
	}
	if topics[ferrySide], err = b.setupFanoutTopic(ctx, fmt.Sprintf("bench-fanout-ferry-%d", n), n); err != nil {
		return res, err
	}
	data := bodies(fanoutBatch)
	nBatches := int64(len(batchKeys))
	stride := nBatches / fanoutClients
	order := []side{rawSide, ferrySide}
	if !rawFirst {
		order = []side{ferrySide, rawSide}
	}
	var done [2]Phase
	for _, s := range order {
		if err := b.resetFanout(ctx); err != nil {
			return res, err
		}
		t := topics[s]
		counter := make([]int64, fanoutClients)
		label := fmt.Sprintf("fanout-%d/%s", n, s)
		// Requests still running just after the window ends would not
		// count; they are cancelled there rather than waited for (with
		// 8 clients queued on the partition locks that would take up to
		// 8 transactions, seconds at N = 100).
		cut := time.Now().Add(warmupFor(perSide) + perSide + 5*time.Millisecond)
		p, err := b.runLoad(ctx, label, fanoutClients, perSide, func(ctx context.Context, w int) (int, error) {
			j := (int64(w)*stride + counter[w]) % nBatches
			counter[w]++
			octx, cancel := context.WithDeadline(ctx, cut)
			defer cancel()
			var err error
			if s == rawSide {
				err = rawFanoutBatch(octx, b, t.id, t.subs, batchKeys[j], data)
			} else {
				err = b.client.Publish(octx, t.name, batchReqs[j])
			}
			if err != nil && octx.Err() != nil && ctx.Err() == nil {
				return 0, nil // cut after the window: not counted
			}
			return fanoutBatch, err
		})
		if err != nil {
			return res, fmt.Errorf("%d subscriptions, %s: %w", n, s, err)
		}
		if _, err := b.checkFanout(ctx, s, t); err != nil {
			return res, err
		}
		checked[s]++
		done[s] = p
	}
	res.raw, res.ferry = done[rawSide], done[ferrySide]
	progress("  %d subscriptions: raw %.0f events/s, Ferry %.0f events/s (%.2f×)",
		n, res.raw.Rate(), res.ferry.Rate(), res.ferry.Rate()/res.raw.Rate())
	// Leave nothing behind: empty tables (no checkpoint: the next window
	// starts with one), then the topics go, and their cleanup jobs find
	// nothing to delete.
	if _, err := b.raw.Exec(ctx, truncateFanout); err != nil {
		return res, fmt.Errorf("truncate: %w", err)
	}
	for _, t := range topics {
		if err := b.deleteTopic(ctx, t.name); err != nil {
			return res, fmt.Errorf("delete topic %s: %w", t.name, err)
		}
	}
	return res, nil
}

// pushReceiver is the in-process webhook endpoint of part 2: it records
// when each event id first arrived and answers 204.
type pushReceiver struct {
	*arrivals
	srv *http.Server
	url string
}

func startPushReceiver() (*pushReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &pushReceiver{arrivals: newArrivals(), url: "http://" + ln.Addr().String() + "/hook"}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *pushReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	id := req.Header.Get(jobs.HeaderWebhookID)
	_, _ = io.Copy(io.Discard, req.Body)
	r.record(id, now)
	w.WriteHeader(http.StatusNoContent)
}

func (r *pushReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// pushOutcome is part 2's and part 3's outcome.
type pushOutcome struct {
	publishLatency  // publish → delivered (arrived at the receiver)
	stmts           stmtList
	stmtsOK         bool
	attempts, okAtt int64
	attemptMs       float64
	elapsed         time.Duration
}

// measurePush runs parts 2 and 3.
func (b *Bench) measurePush(ctx context.Context, d time.Duration) (pushOutcome, error) {
	var out pushOutcome
	recv, err := startPushReceiver()
	if err != nil {
		return out, err
	}
	defer recv.close()
	const topic = "bench-push"
	tid, err := b.createTopic(ctx, topic)
	if err != nil {
		return out, err
	}
	subID, err := b.createSubscription(ctx, topic, tid, "push",
		fmt.Sprintf(`{"push":{"url":%q,"timeout_seconds":%d,"max_in_flight":%d}}`, recv.url, pushTimeout, pushMaxInFlight))
	if err != nil {
		return out, fmt.Errorf("push subscription: %w", err)
	}
	defer func() {
		if err := b.deleteTopic(context.WithoutCancel(ctx), topic); err != nil {
			progress("  delete topic %s: %v", topic, err)
		}
	}()
	stop, err := b.trackStatements(ctx)
	if err != nil {
		return out, err
	}
	defer stop()
	keys := eventKeys()

	// Warm-up: half a second at the same rate, all delivered, not counted
	// (the first kick starts the push job).
	warm, err := b.warmUp(ctx, topic, "evt_warmup", pushRate, keys, recv.arrivals, "pushed")
	if err != nil {
		return out, err
	}
	var pubs []timedPublish
	measure := func() error {
		var err error
		pubs, out.elapsed, err = b.publishAndAwait(ctx, topic, "evt_bench", int(d.Seconds()*pushRate), pushRate, keys, recv.arrivals, warm)
		if err != nil {
			return err
		}
		return ctx.Err()
	}
	if out.stmts, out.stmtsOK, err = b.countStatements(ctx, true, measure); err != nil {
		return out, err
	}
	out.publishLatency = tallyPublishes(pubs, recv.arrivals)
	// The worker records attempts after their requests end: give the last
	// ones a moment.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := b.raw.QueryRow(ctx, `
			SELECT count(*), count(*) FILTER (WHERE ok), coalesce(avg(duration_ms), 0)::float8
			FROM ferry.push_attempts WHERE queue_id = $1 AND message_id LIKE 'evt_bench-%'`, subID).
			Scan(&out.attempts, &out.okAtt, &out.attemptMs); err != nil {
			return out, fmt.Errorf("push attempts: %w", err)
		}
		if out.attempts >= int64(out.arrived) || time.Now().After(deadline) {
			return out, nil
		}
	}
}

func (b *Bench) fanout(ctx context.Context) (*Section, error) {
	perSide, pushFor := b.fanoutTimes()
	if err := warmPool(ctx, b.raw, fanoutClients); err != nil {
		return nil, err
	}
	keys := eventKeys()
	nBatches := keyPool / fanoutBatch
	batchKeys := make([][]string, nBatches)
	batchReqs := make([][]byte, nBatches)
	for i := range batchKeys {
		batchKeys[i] = keys[i*fanoutBatch : (i+1)*fanoutBatch]
		batchReqs[i] = PublishRequest(batchKeys[i])
	}

	var (
		rows    []Row
		checked [2]int64 // rounds checked per side
	)
	for i, n := range fanoutSubCounts {
		progress("  fan-out to %d pull subscriptions, batches of %d, %d clients", n, fanoutBatch, fanoutClients)
		r, err := b.measureFanout(ctx, n, perSide, i%2 == 0, batchKeys, batchReqs, &checked)
		if err != nil {
			var de *densityError
			if errors.As(err, &de) {
				return nil, err
			}
			return nil, fmt.Errorf("fan-out to %d: %w", n, err)
		}
		rows = append(rows, fanoutRows(r)...)
	}
	rows = append(rows, Row{Metric: "fan-out: offsets dense and deliveries = events × N after every window",
		Raw: fmt.Sprintf("all %d windows", checked[rawSide]), Ferry: fmt.Sprintf("all %d windows", checked[ferrySide])})

	// Part 2 starts from a checkpoint, as every window of part 1 does.
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}
	progress("  publish → push delivery, %d events/s for %s", pushRate, pushFor)
	p, err := b.measurePush(ctx, pushFor)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	rows = append(rows, pushRows(p)...)
	var grids []Grid
	var notes []string
	if p.stmtsOK {
		sr, g := stmtRows(p)
		rows = append(rows, sr...)
		grids = append(grids, g)
	} else {
		notes = append(notes, "**Statements per delivery skipped:** "+b.statementsReason+
			" (part 3 needs pg_stat_statements loaded through shared_preload_libraries).")
	}
	if p.failed > 0 || p.arrived < p.published {
		notes = append(notes, fmt.Sprintf("**Push:** %d publishes failed; %d of %d published events were not pushed within 10 s of the last publish.",
			p.failed, p.published-p.arrived, p.published))
	}
	notes = append(notes, pushNote(p))

	return &Section{
		Rows:  rows,
		Grids: grids,
		Notes: notes,
		How: fmt.Sprintf("**Fan-out (part 1):** per side a %d-partition topic created through the API with N = %v pull subscriptions (`PUT /v1/topics/{t}/subscriptions/{s}` `{}`: "+
			"no filter, unordered); %d concurrent clients publish batches of %d keyed events (the keys and body of scenario 8) for one window of %s per side and N "+
			"(raw first for N = 1 and 100, Ferry first for N = 10), each after a TRUNCATE of the message and event tables, next_offset reset to 0 and a CHECKPOINT, "+
			"with a %s warm-up not counted; a request counts when it completes inside the window, and requests still running 5 ms after it ends are cancelled "+
			"(a cut Ferry publish may still commit; the check below reads one snapshot). One window rather than alternating rounds: at N = 100 "+
			"a transaction takes around a second and every round would add a warm-up, the requests still in flight at its end and a reset. "+
			"With so few, large transactions the rates at N = 100 are coarse (see the requests counted) and move by tens of percent between runs. Ferry: `POST /v1/topics/{t}/events`; the publish transaction writes the events and one `ferry.messages` row per "+
			"(subscription, event), plus its dedup rows. Raw: one pgx batch (one round trip, one implicit transaction) of an `UPDATE ferry.topic_partitions SET "+
			"next_offset = next_offset + n` per partition touched (in partition order), then one statement that `INSERT`s the %d events into `ferry.events` "+
			"(offsets from the bumped counters, `RETURNING` them) and `INSERT ... SELECT`s %d×N rows into `ferry.messages` from that and `unnest` of the N "+
			"subscription ids (ids from `nextval`, the event as the body, built with `jsonb_build_object` in the shape Ferry stores it), into the pull "+
			"subscriptions of a topic of its own made through the API, so triggers and indexes are the same; no dedup. Deliveries/s = events/s × N. After every "+
			"window each partition's offsets are checked dense and the topic's deliveries (`ferry.queue_counts`) equal to events × N; both topics are deleted "+
			"through the API before the next N. "+
			"**Push latency (part 2):** one %d-partition topic, one push subscription (`\"push\": {\"url\": ..., \"timeout_seconds\": %d, \"max_in_flight\": %d}`, "+
			"no rate limit) to an in-process `net/http` receiver on 127.0.0.1 that answers 204 and records when each event id (`webhook-id`) first arrives. "+
			"Single-event publishes with client-given ids, started from a schedule at %d events/s for %s (open loop: each in its own goroutine, so a slow "+
			"publish does not delay the next), after a %s warm-up at the same rate whose events were all delivered first (not counted). Latency = arrival "+
			"at the receiver − the time just before the publish request was sent; every published event must arrive (the bench waits up to 10 s after the "+
			"last publish). The server runs with `AllowPrivatePush` (loopback URLs allowed), Ferry's default push settings otherwise "+
			"(one push worker slot per instance in this configuration: `PushWorkers` is left at 0, served as 1). "+
			"**Statements (part 3):** pg_stat_statements (track = top) reset after the warm-up and read as soon as the last event arrived; every statement "+
			"of the bench's database is counted, River's included (its job and maintenance statements), and divided by "+
			"the events delivered. The bench runs no SQL in that window. BEGIN and COMMIT sent as plain statements are recorded; the publish "+
			"transaction's BEGIN and COMMIT travel in a pipeline (extended protocol), which pg_stat_statements on PostgreSQL 15 mostly does not record: "+
			"two statements are added per publish transaction (counted by its first statement, the `ferry.event_dedup` claim) beyond the upper-case BEGINs recorded.",
			topicPartitions, fanoutSubCounts, fanoutClients, fanoutBatch, perSide, warmupFor(perSide),
			fanoutBatch, fanoutBatch, topicPartitions, pushTimeout, pushMaxInFlight, pushRate, pushFor, time.Second/2),
	}, nil
}

// fanoutRows are part 1's rows for one subscription count.
func fanoutRows(r fanoutResult) []Row {
	n := float64(r.subs)
	what := fmt.Sprintf("fan-out to %d: ", r.subs)
	rows := []Row{
		{Metric: what + "publish throughput (batches of 100)", Raw: fmtRateOf(r.raw.Rate(), events), Ferry: fmtRateOf(r.ferry.Rate(), events),
			Ratio: ratioOf(r.ferry.Rate(), r.raw.Rate()), Target: "—"},
		{Metric: what + "deliveries written (events/s × N)", Raw: fmtInt(int64(r.raw.Rate()*n+0.5)) + " deliveries/s",
			Ferry: fmtInt(int64(r.ferry.Rate()*n+0.5)) + " deliveries/s", Ratio: ratioOf(r.ferry.Rate(), r.raw.Rate())},
	}
	rows = append(rows, Row{Metric: what + "requests counted in the window", Raw: fmtInt(int64(len(r.raw.Latencies))), Ferry: fmtInt(int64(len(r.ferry.Latencies)))})
	rows = append(rows, latencyRows(what+"request latency", Summarize(r.raw.Latencies), Summarize(r.ferry.Latencies))...)
	rows = append(rows,
		Row{Metric: what + "WAL bytes per delivery", Raw: fmt.Sprintf("%.0f", r.raw.WALPerMessage()/n),
			Ferry: fmt.Sprintf("%.0f", r.ferry.WALPerMessage()/n), Ratio: ratioOf(r.ferry.WALPerMessage(), r.raw.WALPerMessage())},
		Row{Metric: what + "PostgreSQL CPU-ms per 1,000 deliveries", Raw: cpuPerDelivery(r.raw, n), Ferry: cpuPerDelivery(r.ferry, n),
			Ratio: ratioOf(r.ferry.CPU.PG/r.ferry.Rate(), r.raw.CPU.PG/r.raw.Rate())},
		Row{Metric: what + "CPU cores in use", Raw: fmtCPU(r.raw.CPU), Ferry: fmtCPU(r.ferry.CPU)},
	)
	return rows
}

func cpuPerDelivery(p Phase, n float64) string {
	if !p.CPU.PGKnown {
		return "n/a"
	}
	if p.Rate() == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", p.CPU.PG/(p.Rate()*n)*1e6)
}

// verdict renders a target and whether it was met.
func verdict(target string, ok bool) (string, *bool) {
	if ok {
		return target + ": target met", pass(true)
	}
	return target + ": missed", pass(false)
}

// pushRows are part 2's rows.
func pushRows(p pushOutcome) []Row {
	l := p.latency
	complete := p.arrived == p.published && p.failed == 0
	t50, ok50 := verdict("< 50 ms (issue)", complete && l.N > 0 && l.P50 < pushP50Target)
	t99, ok99 := verdict("< 250 ms (issue)", complete && l.N > 0 && l.P99 < pushP99Target)
	const what = "push: "
	return []Row{
		{Metric: what + "publish → delivered latency p50", Raw: "—", Ferry: fmtMs(l.P50), Target: t50, Pass: ok50},
		{Metric: what + "publish → delivered latency p90", Raw: "—", Ferry: fmtMs(l.P90)},
		{Metric: what + "publish → delivered latency p99", Raw: "—", Ferry: fmtMs(l.P99), Target: t99, Pass: ok99},
		{Metric: what + "publish → delivered latency max", Raw: "—", Ferry: fmtMs(l.Max)},
		{Metric: what + "events delivered / published", Raw: "—",
			Ferry:  fmt.Sprintf("%s / %s (%d missing, %d publishes failed)", fmtInt(int64(p.arrived)), fmtInt(int64(p.published)), p.published-p.arrived, p.failed),
			Target: "= published", Pass: pass(complete)},
		{Metric: what + "repeated deliveries (same event id again)", Raw: "—", Ferry: fmtInt(p.dups)},
		{Metric: what + "publish request latency p50 / p99", Raw: "—", Ferry: fmtMs(p.publish.P50) + " / " + fmtMs(p.publish.P99)},
		{Metric: what + "publish answered → delivered p50 / p99", Raw: "—", Ferry: fmtMs(p.after.P50) + " / " + fmtMs(p.after.P99)},
		{Metric: what + "push attempts recorded (ok), mean attempt duration", Raw: "—",
			Ferry: fmt.Sprintf("%s (%s), %.1f ms", fmtInt(p.attempts), fmtInt(p.okAtt), p.attemptMs)},
	}
}

// stmtRows are part 3's rows and its grid of top statements.
func stmtRows(p pushOutcome) ([]Row, Grid) {
	tags := publishTags()
	var (
		recorded   = p.stmts.calls()
		river      = p.stmts.where(stmtStat.isRiver).calls()
		publishTx  = p.stmts.tagged(publishClaimTag).calls()
		begins     = p.stmts.where(func(s stmtStat) bool { return strings.TrimSpace(s.query) == "BEGIN" }).calls()
		publishing = p.stmts.where(func(s stmtStat) bool { return slices.Contains(tags, s.tag) || s.isTxControl() }).calls()
	)
	// BEGIN and COMMIT of the publish transactions that were not recorded
	// (an upper-case BEGIN recorded is taken to be one of theirs).
	unseen := 2 * max(publishTx-begins, 0)
	all := recorded + unseen
	d := float64(max(p.arrived, 1))
	per := float64(all) / d
	rows := []Row{
		{Metric: "SQL statements per pushed delivery, all (publish + fan-out + push, River included)", Raw: "—", Ferry: fmt.Sprintf("%.2f", per)},
		{Metric: "of which: pipelined BEGIN/COMMIT of publish transactions, added (not recorded by pg_stat_statements)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(unseen)/d)},
		{Metric: "of which: River's (jobs, maintenance)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(river)/d)},
		{Metric: "of which: publishing (the publish transactions, BEGIN/COMMIT included)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(publishing+unseen)/d)},
		func() Row {
			deliver := float64(all-publishing-unseen-river) / d
			t, ok := verdict("≤ 5 (issue: delivery state changes; Convoy ~32)", p.arrived > 0 && deliver <= stmtsPerDeliveryTarget)
			return Row{Metric: "of which: delivery (claims, acks, nacks, attempt records, wake-ups)", Raw: "—",
				Ferry: fmt.Sprintf("%.2f", deliver), Target: t, Pass: ok}
		}(),
		{Metric: "publish transactions per delivered event (group commit merges publishes)", Raw: "—", Ferry: fmt.Sprintf("%.2f", float64(publishTx)/d)},
		{Metric: "statements in the window (recorded + added), events delivered, window", Raw: "—",
			Ferry: fmt.Sprintf("%s + %s, %s, %s", fmtInt(recorded), fmtInt(unseen), fmtInt(int64(p.arrived)), p.elapsed.Round(10*time.Millisecond))},
	}
	g := stmtGrid(fmt.Sprintf("Push (part 3): the statements with the most calls during the measured window (%s events delivered)", fmtInt(int64(p.arrived))),
		p.stmts, int64(max(p.arrived, 1)), "per delivery", 15)
	return rows, g
}

// pushNote says where the push latency goes, from the measured split.
func pushNote(p pushOutcome) string {
	return fmt.Sprintf("Where push latency goes: of the p50 of %s from publish to delivery, the publish request itself (the group-committed "+
		"transaction writing the event and its delivery, and the answer) takes %s at p50; the rest, from the publish's answer to the POST arriving "+
		"(kick or notifier wake-up of the push worker, claim, HTTP request), %s at p50 (%s at p99; negative when the POST arrived before the "+
		"publisher had read its answer).",
		fmtMs(p.latency.P50), fmtMs(p.publish.P50), fmtMs(p.after.P50), fmtMs(p.after.P99))
}
