package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-mq/ferry/internal/server"
)

// Scenario 11: cold start. A new user's first minutes: a fresh server on a
// fresh database is used lightly, from many connections, on near-empty
// tables (so that its pooled connections cache plans made while the tables
// were tiny); then a backlog builds on a queue and a topic created after
// that, of which the planner's statistics know nothing. Receives,
// subscription receives, group polls and event reads are measured there
// and on a warm server (one booted after the same backlog was built and
// analysed), and compared as cold/warm ratios. A statement whose plan can
// flip into walking the whole backlog per batch shows as a bad ratio; every
// measurement is bounded in time, so such a cliff cannot hang the bench.

const (
	// coldBatch is the messages per send and the events per publish that
	// build the backlog, from coldBuilders clients.
	coldBatch, coldBuilders = 1000, 4
	// coldTake is max_messages, max_events or limit of every measured
	// operation, coldConsumers the concurrency of the receives and event
	// reads (the group has one member per partition).
	coldTake, coldConsumers = 100, 16
	// coldTarget is the bound on cold/warm.
	coldTarget = 1.5
	// lightClients are the light use's concurrent clients; each starts
	// its next request on the next lightTick, so every tick is a burst of
	// lightClients requests at once, spread over as many connections.
	lightClients, lightTick = maxClients, 100 * time.Millisecond
	// lightTake is max_messages, max_events and limit of the light use.
	lightTake = 10
	// benchAppName is the application_name of the bench's own sessions
	// on an instance's database.
	benchAppName = "ferry-bench"
)

// The resources of scenario 11: the light use's, then the backlog's.
const (
	lightQueue, lightTopic, lightSub, lightGroup = "bench-light", "bench-light-events", "bench-light-sub", "bench-light-group"
	coldQueue, coldTopic, coldSub, coldGroup     = "bench-orders", "bench-order-events", "bench-billing", "bench-analytics"
)

// coldSizes are scenario 11's sizes (the -cold-* flags).
type coldSizes struct {
	messages, events int
	light, budget    time.Duration
}

// coldSizes are the sizes the flags set.
func (b *Bench) coldSizes() coldSizes {
	return coldSizes{messages: b.opts.ColdMessages, events: b.opts.ColdEvents, light: b.opts.ColdLight, budget: b.opts.ColdBudget}
}

// instance is a Ferry server on a database of its own, with a small pool
// for the bench's own queries.
type instance struct {
	db, url string
	srv     *server.Server
	client  *FerryClient
	raw     *pgxpool.Pool
}

// startInstance creates a database on the bench's server, boots Ferry on
// it (which migrates it: a new install) and opens the bench's pool.
func (b *Bench) startInstance(ctx context.Context, suffix string) (_ *instance, err error) {
	in := &instance{db: b.dbName + "_" + suffix}
	if in.url, err = b.newDatabase(ctx, in.db); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.stopInstance(in)
		}
	}()
	if err := b.bootInstance(ctx, in, false); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(in.url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 2
	pcfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	if in.raw, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("pool on %s: %w", in.db, err)
	}
	return in, nil
}

// bootInstance starts a new Ferry server, with a new pool, on the
// instance's database.
func (b *Bench) bootInstance(ctx context.Context, in *instance, skipMigrations bool) error {
	cfg := b.ferryConfigFor(in.url)
	cfg.SkipMigrations = skipMigrations
	s, err := server.New(ctx, cfg, b.log)
	if err != nil {
		return fmt.Errorf("boot Ferry on %s: %w", in.db, err)
	}
	s.Start()
	in.srv, in.client = s, b.client.At(s.URL())
	return nil
}

// restartInstance replaces the instance's server by a new one: no
// connection of the new pool has run a statement yet.
func (b *Bench) restartInstance(ctx context.Context, in *instance) error {
	err := in.srv.Shutdown(ctx)
	in.srv = nil
	if err != nil {
		return fmt.Errorf("shut down Ferry on %s: %w", in.db, err)
	}
	return b.bootInstance(ctx, in, true)
}

// stopInstance shuts the server down and drops the database; a failure
// is reported and changes nothing else.
func (b *Bench) stopInstance(in *instance) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if in.srv != nil {
		if err := in.srv.Shutdown(ctx); err != nil {
			progress("  shut down Ferry on %s: %v", in.db, err)
		}
	}
	if in.raw != nil {
		in.raw.Close()
	}
	if err := b.dropDatabase(ctx, in.db); err != nil {
		progress("  %v", err)
	}
}

// receiveAck receives up to n messages from a queue or subscription (by
// path) and acks them. It returns how many it got.
func receiveAck(ctx context.Context, c *FerryClient, path Target, n int) (int, error) {
	receipts, err := c.ReceiveFrom(ctx, path, n, 0)
	if err != nil || len(receipts) == 0 {
		return 0, err
	}
	return len(receipts), c.AckAt(ctx, path, receipts)
}

// pollCommit polls a group as one member (no wait) and commits what it
// got. It returns how many events it got; errFenced when the commit was.
func pollCommit(ctx context.Context, c *FerryClient, topic, group, member string, n int) (int, error) {
	r, err := c.GroupPoll(ctx, topic, group, groupPollRequest{Consumer: member, MaxEvents: n, SessionTimeoutSeconds: groupSession})
	if err != nil || len(r.Events) == 0 {
		return 0, err
	}
	return len(r.Events), c.GroupCommit(ctx, topic, group, member, r.Generation, lastOffsets(r.Events))
}

// lightUse is what the light use did.
type lightUse struct {
	kinds    []string
	requests []int64 // per kind
	conns    int32   // connections of the server's pool at the end
	elapsed  time.Duration
}

// lightKind is one kind of request of the light use.
type lightKind struct {
	name string
	op   func(ctx context.Context, worker int, i int64) error
}

// lightKinds are the light use's requests, on a small queue and a small
// topic (with a subscription and a group): everything the measured
// operations do, on tables with next to nothing in them.
func lightKinds(c *FerryClient) []lightKind {
	send := SendRequest(1)
	keys := eventKeys()
	sub := SubscriptionTarget(lightTopic, lightSub)
	return []lightKind{
		{"send", func(ctx context.Context, _ int, _ int64) error { return c.Send(ctx, lightQueue, send) }},
		{"receive+ack", func(ctx context.Context, _ int, _ int64) error {
			_, err := receiveAck(ctx, c, QueueTarget(lightQueue), lightTake)
			return err
		}},
		{"publish", func(ctx context.Context, w int, i int64) error {
			return c.Publish(ctx, lightTopic, PublishRequest([]string{keys[(int64(w)*keyPool/lightClients+i)%keyPool]}))
		}},
		{"subscription receive+ack", func(ctx context.Context, _ int, _ int64) error {
			_, err := receiveAck(ctx, c, sub, lightTake)
			return err
		}},
		{"group poll+commit", func(ctx context.Context, w int, _ int64) error {
			_, err := pollCommit(ctx, c, lightTopic, lightGroup, fmt.Sprintf("light-%02d", w), lightTake)
			if errors.Is(err, errFenced) { // a member joined meanwhile
				return nil
			}
			return err
		}},
		{"event read", func(ctx context.Context, w int, _ int64) error {
			_, err := c.ReadEvents(ctx, lightTopic, w%topicPartitions, 0, lightTake)
			return err
		}},
	}
}

// runLightUse uses a small queue and topic for d from lightClients
// clients, in bursts every lightTick; client w's i-th request is of kind
// (w + i) mod kinds.
func (b *Bench) runLightUse(ctx context.Context, in *instance, d time.Duration) (lightUse, error) {
	c := in.client
	if err := c.CreateQueue(ctx, lightQueue); err != nil {
		return lightUse{}, err
	}
	if err := c.CreateTopic(ctx, lightTopic, topicPartitions); err != nil {
		return lightUse{}, err
	}
	if err := c.CreateSubscription(ctx, lightTopic, lightSub, `{}`); err != nil {
		return lightUse{}, err
	}
	kinds := lightKinds(c)
	counts := make([]atomic.Int64, len(kinds))
	iters := make([]int64, lightClients) // each client touches its own
	start := time.Now()
	_, err := runBounded(ctx, "cold-start/light", lightClients, math.MaxInt64, 0, start.Add(d), func(ctx context.Context, w int) error {
		i := iters[w]
		iters[w]++
		k := (w + int(i%int64(len(kinds)))) % len(kinds)
		if err := kinds[k].op(ctx, w, i); err != nil {
			return fmt.Errorf("%s: %w", kinds[k].name, err)
		}
		counts[k].Add(1)
		sleepUntil(ctx, start.Add(time.Since(start).Truncate(lightTick)+lightTick))
		return nil
	})
	if err != nil {
		return lightUse{}, fmt.Errorf("light use: %w", err)
	}
	u := lightUse{elapsed: time.Since(start), conns: in.srv.Pool().Stat().TotalConns()}
	for k, kind := range kinds {
		u.kinds = append(u.kinds, kind.name)
		u.requests = append(u.requests, counts[k].Load())
	}
	return u, nil
}

// total is the light use's requests.
func (u lightUse) total() (n int64) {
	for _, r := range u.requests {
		n += r
	}
	return n
}

// backlog is how long building the backlog took, and the auto-analyses
// of each table when the events were published and when the messages were
// sent (the end).
type backlog struct {
	messages, events           time.Duration
	afterEvents, afterMessages map[string]int64
}

// buildBacklog creates the queue, and the topic with its pull subscription,
// then publishes the events and sends the messages through the API, in
// batches of coldBatch from coldBuilders clients.
func (b *Bench) buildBacklog(ctx context.Context, in *instance, sz coldSizes) (backlog, error) {
	var bl backlog
	c := in.client
	if err := c.CreateQueue(ctx, coldQueue); err != nil {
		return bl, err
	}
	if err := c.CreateTopic(ctx, coldTopic, topicPartitions); err != nil {
		return bl, err
	}
	if err := c.CreateSubscription(ctx, coldTopic, coldSub, `{}`); err != nil {
		return bl, err
	}
	// The events first: the queue's backlog, built in a second or two,
	// then meets the first measurement at once, with as little time as
	// possible for autovacuum to analyse it in between.
	t0 := time.Now()
	keys := eventKeys()
	var next atomic.Int64
	if err := runCounted(ctx, "cold-start/backlog-publish", coldBuilders, int64(sz.events/coldBatch), func(ctx context.Context) error {
		i := next.Add(1) - 1
		batch := make([]string, coldBatch)
		for j := range batch {
			batch[j] = keys[(i*coldBatch+int64(j))%keyPool]
		}
		return c.Publish(ctx, coldTopic, PublishRequest(batch))
	}); err != nil {
		return bl, fmt.Errorf("backlog publish: %w", err)
	}
	bl.events = time.Since(t0)
	var err error
	if bl.afterEvents, err = autoAnalyses(ctx, in.raw); err != nil {
		return bl, err
	}
	t1 := time.Now()
	send := SendRequest(coldBatch)
	if err := runCounted(ctx, "cold-start/backlog-send", coldBuilders, int64(sz.messages/coldBatch), func(ctx context.Context) error {
		return c.Send(ctx, coldQueue, send)
	}); err != nil {
		return bl, fmt.Errorf("backlog send: %w", err)
	}
	bl.messages = time.Since(t1)
	if bl.afterMessages, err = autoAnalyses(ctx, in.raw); err != nil {
		return bl, err
	}
	progress("  backlog: %s events in %s, then %s messages in %s", fmtInt(int64(sz.events)), bl.events.Round(100*time.Millisecond),
		fmtInt(int64(sz.messages)), bl.messages.Round(100*time.Millisecond))
	return bl, nil
}

// coldTally counts the measured operations that did less than a full
// batch: receives or polls that returned fewer than coldTake, and group
// commits that were fenced.
type coldTally struct{ short, fenced atomic.Int64 }

// coldOp is a measured operation of one worker.
type coldOp func(ctx context.Context, worker int) error

// coldMeasure is one of the scenario's four measurements.
type coldMeasure struct {
	name  string // as the report names it
	table string // the table of ferry whose auto-analyses are reported
	// queueBacklog says the measurement consumes the queue's backlog
	// (built last), not the topic's.
	queueBacklog bool
	workers      int
	ops          int64
	// prepare readies the instance and returns the operation.
	prepare func(ctx context.Context, in *instance, t *coldTally) (coldOp, error)
}

// coldMeasures are the four measurements. The receives and polls take 40%
// of the backlog, so that the last ones still find most of it.
func coldMeasures(sz coldSizes) []coldMeasure {
	cycles := func(n int) int64 { return max(1, int64(n)*2/5/coldTake) }
	receive := func(path Target) func(context.Context, *instance, *coldTally) (coldOp, error) {
		return func(_ context.Context, in *instance, t *coldTally) (coldOp, error) {
			return func(ctx context.Context, _ int) error {
				n, err := receiveAck(ctx, in.client, path, coldTake)
				if err == nil && n < coldTake {
					t.short.Add(1)
				}
				return err
			}, nil
		}
	}
	return []coldMeasure{
		{name: "queue receive(100)+ack", table: "messages", queueBacklog: true, workers: coldConsumers, ops: cycles(sz.messages),
			prepare: receive(QueueTarget(coldQueue))},
		{name: "subscription receive(100)+ack", table: "messages", workers: coldConsumers, ops: cycles(sz.events),
			prepare: receive(SubscriptionTarget(coldTopic, coldSub))},
		{name: "group poll(100)+commit", table: "events", workers: topicPartitions, ops: cycles(sz.events),
			prepare: prepareGroupPolls},
		{name: "event read(100)", table: "events", workers: coldConsumers, ops: max(1, int64(sz.events)/50),
			prepare: prepareEventReads},
	}
}

// prepareGroupPolls makes one member per partition join a new group (start
// earliest) and returns member w's poll (max_events 100, no wait) and
// commit.
func prepareGroupPolls(ctx context.Context, in *instance, t *coldTally) (coldOp, error) {
	if _, err := joinGroup(ctx, in.client, coldTopic, coldGroup, topicPartitions); err != nil {
		return nil, err
	}
	return func(ctx context.Context, w int) error {
		n, err := pollCommit(ctx, in.client, coldTopic, coldGroup, memberName(w), coldTake)
		if errors.Is(err, errFenced) { // a rebalance: a slow member's session ran out
			t.fenced.Add(1)
			return nil
		}
		if err == nil && n < coldTake {
			t.short.Add(1)
		}
		return err
	}, nil
}

// prepareEventReads returns reads of 100 events from offsets drawn, with a
// fixed seed (the same on both sides), uniformly over each partition's
// events, the partitions in turn.
func prepareEventReads(ctx context.Context, in *instance, _ *coldTally) (coldOp, error) {
	rows, err := in.raw.Query(ctx, `
		SELECT greatest(p.next_offset, coalesce((SELECT e."offset" + 1 FROM ferry.events e
			WHERE e.topic_id = p.topic_id AND e.partition = p.partition ORDER BY e."offset" DESC LIMIT 1), 0))
		FROM ferry.topic_partitions p JOIN ferry.topics t ON t.id = p.topic_id
		WHERE t.name = $1 ORDER BY p.partition`, coldTopic)
	if err != nil {
		return nil, err
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(11, 11))
	type read struct {
		partition int
		from      int64
	}
	reads := make([]read, 4096)
	for i := range reads {
		p := i % len(sizes)
		if sizes[p] < coldTake {
			return nil, fmt.Errorf("partition %d has %d events, fewer than %d", p, sizes[p], coldTake)
		}
		reads[i] = read{p, r.Int64N(sizes[p] - coldTake + 1)}
	}
	var next atomic.Int64
	return func(ctx context.Context, _ int) error {
		rd := reads[(next.Add(1)-1)%int64(len(reads))]
		events, err := in.client.ReadEvents(ctx, coldTopic, rd.partition, rd.from, coldTake)
		if err == nil && len(events) != coldTake {
			err = fmt.Errorf("event read at %d/%d returned %d events, not %d", rd.partition, rd.from, len(events), coldTake)
		}
		return err
	}, nil
}

// autoAnalyses is how often autovacuum has analysed each table of ferry.
func autoAnalyses(ctx context.Context, db *pgxpool.Pool) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT relname, autoanalyze_count FROM pg_stat_user_tables WHERE schemaname = 'ferry'`)
	if err != nil {
		return nil, err
	}
	type count struct {
		Name string `db:"relname"`
		N    int64  `db:"autoanalyze_count"`
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByName[count])
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(counts))
	for _, c := range counts {
		out[c.Name] = c.N
	}
	return out, nil
}

// coldRun is one measurement on one side.
type coldRun struct {
	run           boundedRun
	short, fenced int64
	// Auto-analyses of the measurement's table after its backlog was
	// complete: before the measurement started, and while it ran.
	analysedBefore, analysedDuring int64
}

// measureSide runs the measurements on an instance, each with its own
// time budget (a warm-up of one operation per worker included).
func (b *Bench) measureSide(ctx context.Context, side string, in *instance, ms []coldMeasure, budget time.Duration, bl backlog) ([]coldRun, error) {
	out := make([]coldRun, len(ms))
	for i, m := range ms {
		var t coldTally
		op, err := m.prepare(ctx, in, &t)
		if err != nil {
			return nil, fmt.Errorf("%s side, %s: %w", side, m.name, err)
		}
		before, err := autoAnalyses(ctx, in.raw)
		if err != nil {
			return nil, err
		}
		run, err := runBounded(ctx, "cold-start/"+side+"/"+m.name, m.workers, m.ops, 1, time.Now().Add(budget), op)
		if err != nil {
			return nil, fmt.Errorf("%s side, %s: %w", side, m.name, err)
		}
		after, err := autoAnalyses(ctx, in.raw)
		if err != nil {
			return nil, err
		}
		base := bl.afterEvents
		if m.queueBacklog {
			base = bl.afterMessages
		}
		out[i] = coldRun{run: run, short: t.short.Load(), fenced: t.fenced.Load(),
			analysedBefore: before[m.table] - base[m.table], analysedDuring: after[m.table] - before[m.table]}
		s := Summarize(run.Latencies)
		progress("  %s, %s: p50 %s p99 %s max %s (%s; ferry.%s auto-analysed %d / %d after its backlog)", side, m.name,
			fmtMs(s.P50), fmtMs(s.P99), fmtMs(s.Max), opsCell(out[i], m.ops), m.table, out[i].analysedBefore, out[i].analysedDuring)
	}
	return out, nil
}

// coldSide is what the cold side did and measured.
type coldSide struct {
	light   lightUse
	backlog backlog
	runs    []coldRun
}

// measureCold runs the cold side: a new install, light use, then the
// backlog on a new queue and topic, measured at once (no ANALYZE; only
// autovacuum, as it would).
func (b *Bench) measureCold(ctx context.Context, sz coldSizes, ms []coldMeasure) (coldSide, error) {
	var out coldSide
	in, err := b.startInstance(ctx, "cold")
	if err != nil {
		return out, err
	}
	defer b.stopInstance(in)
	progress("  cold: light use, %d clients in bursts every %s, for %s", lightClients, lightTick, sz.light)
	if out.light, err = b.runLightUse(ctx, in, sz.light); err != nil {
		return out, err
	}
	progress("  cold: %s requests; %d connections in the server's pool", fmtInt(out.light.total()), out.light.conns)
	if out.backlog, err = b.buildBacklog(ctx, in, sz); err != nil {
		return out, err
	}
	if err := b.checkpoint(ctx); err != nil {
		return out, err
	}
	out.runs, err = b.measureSide(ctx, "cold", in, ms, sz.budget, out.backlog)
	return out, err
}

// measureWarm runs the warm side: a new install, the backlog, VACUUM
// ANALYZE, then a new server (a new pool) measures.
func (b *Bench) measureWarm(ctx context.Context, sz coldSizes, ms []coldMeasure) (coldSide, error) {
	var out coldSide
	in, err := b.startInstance(ctx, "warm")
	if err != nil {
		return out, err
	}
	defer b.stopInstance(in)
	if out.backlog, err = b.buildBacklog(ctx, in, sz); err != nil {
		return out, err
	}
	if _, err := in.raw.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return out, fmt.Errorf("vacuum: %w", err)
	}
	if err := b.checkpoint(ctx); err != nil {
		return out, err
	}
	if err := b.restartInstance(ctx, in); err != nil {
		return out, err
	}
	out.runs, err = b.measureSide(ctx, "warm", in, ms, sz.budget, out.backlog)
	return out, err
}

func (b *Bench) coldStart(ctx context.Context) (*Section, error) {
	sz := b.coldSizes()
	ms := coldMeasures(sz)
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}
	cold, err := b.measureCold(ctx, sz, ms)
	if err != nil {
		return nil, fmt.Errorf("cold: %w", err)
	}
	warm, err := b.measureWarm(ctx, sz, ms)
	if err != nil {
		return nil, fmt.Errorf("warm: %w", err)
	}
	return coldSection(sz, ms, cold, warm), nil
}
