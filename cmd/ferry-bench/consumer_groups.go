package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario 10: consumer groups. Part 1 reads a pre-filled topic through a
// group (one member, then four) against the same range reads in raw SQL;
// part 2 measures publish → poll latency of a long-polling member at a
// fixed publish rate; part 3 measures how long a group takes to give a
// silent member's partitions to the member that is left.

const (
	// groupBatch is part 1's max_events per poll, the raw side's LIMIT
	// and the fill's events per transaction.
	groupBatch = 1000
	// groupSession is the session_timeout_seconds of parts 1 and 2.
	groupSession = 30
	// groupRate is part 2's publish rate (events/s) and groupWait its
	// long poll's wait_seconds.
	groupRate, groupWait = 100, 10
	// rebalanceSession and rebalanceWait are part 3's
	// session_timeout_seconds and wait_seconds.
	rebalanceSession, rebalanceWait = 5, 1
)

// groupSizes are the events part 1 reads and part 2's publishing time.
func (b *Bench) groupSizes() (events int, publishFor time.Duration) {
	if b.opts.Quick {
		return 40_000, 3 * time.Second
	}
	return 200_000, 10 * time.Second
}

// The raw side of part 1: what a hand-written reader of a partition does
// per batch — a range read by primary key, then an update of its position
// row (a ferry.group_partitions row of a group the bench inserts, so the
// table, fillfactor and HOT behaviour are Ferry's).
const (
	rawGroupRead = `/* raw:group_read */
		SELECT id, type, key, data::text, attributes::text, partition, "offset", published_at
		FROM ferry.events
		WHERE topic_id = $1 AND partition = $2 AND "offset" >= $3
		ORDER BY "offset" LIMIT $4`
	rawGroupCommit = `/* raw:group_commit */
		UPDATE ferry.group_partitions SET committed_offset = $3::bigint, fetch_offset = $3::bigint + 1
		WHERE group_id = $1 AND partition = $2`
)

// lastOffsets is what a member commits after processing events: per
// partition, the highest offset among them.
func lastOffsets(events []groupEvent) map[int]int64 {
	out := map[int]int64{}
	for _, e := range events {
		if o, ok := out[e.Partition]; !ok || e.Offset > o {
			out[e.Partition] = e.Offset
		}
	}
	return out
}

// groupRead is one read-everything run of part 1.
type groupRead struct {
	readers int
	// events read and committed in the measured run, and the polls
	// (Ferry) or range reads (raw) that read them, including the last,
	// empty ones that find the end.
	events, requests int64
	commits          int64
	fenced           int64
	elapsed          time.Duration
	// read and commit are the latencies of Ferry's poll and commit
	// requests, or of the raw SELECT (rows read) and UPDATE.
	read, commit []time.Duration
	// decode is the client's JSON decoding time of the poll replies
	// (Ferry only), part of read.
	decode time.Duration
	// joined are events read by the unmeasured join polls (Ferry only).
	joined int64

	// win is the CPU, WAL, write transactions and waits over the run.
	win         Phase
	stmts       stmtList
	stmtsOK     bool
	drained     bool // Ferry: every partition's lag is 0 afterwards
	drainDetail string
}

func (r groupRead) rate() float64 { return Rate{Count: r.events, Elapsed: r.elapsed}.PerSecond() }

func (r groupRead) phase() Phase {
	p := r.win
	p.Messages, p.Elapsed = r.events, r.elapsed
	return p
}

// measureGroupRead runs one read run after a checkpoint, measuring CPU,
// WAL, transactions, waits and (when available) statements around it.
func (b *Bench) measureGroupRead(ctx context.Context, label string, run func(ctx context.Context, r *groupRead) error) (groupRead, error) {
	var res groupRead
	if err := b.checkpoint(ctx); err != nil {
		return res, err
	}
	body := func() error {
		win := b.startWindow(ctx)
		start := time.Now()
		var err error
		pprof.Do(ctx, pprof.Labels("role", "client", "load", label), func(ctx context.Context) { err = run(ctx, &res) })
		res.elapsed = time.Since(start)
		win.end(ctx, &res.win)
		return err
	}
	var err error
	if res.stmts, res.stmtsOK, err = b.countStatements(ctx, false, body); err != nil {
		return res, fmt.Errorf("%s: %w", label, err)
	}
	progress("  %s: %s events in %s, %.0f events/s", label, fmtInt(res.events), res.elapsed.Round(time.Millisecond), res.rate())
	return res, nil
}

// rawGroupRead reads the whole topic with readers goroutines, reader r
// taking the partitions p with p mod readers = r (round-robin over them,
// a batch at a time): a range read, then the update of the partition's
// position row.
func (b *Bench) rawGroupRead(ctx context.Context, topicID int64, name string, readers int) (groupRead, error) {
	var gid int64
	if err := b.raw.QueryRow(ctx, `INSERT INTO ferry.consumer_groups (topic_id, name) VALUES ($1, $2) RETURNING id`, topicID, name).Scan(&gid); err != nil {
		return groupRead{}, fmt.Errorf("raw group: %w", err)
	}
	if _, err := b.raw.Exec(ctx, `
		INSERT INTO ferry.group_partitions (group_id, partition, committed_offset, fetch_offset)
		SELECT $1, p, -1, 0 FROM generate_series(0, $2 - 1) AS p`, gid, topicPartitions); err != nil {
		return groupRead{}, fmt.Errorf("raw group partitions: %w", err)
	}
	return b.measureGroupRead(ctx, fmt.Sprintf("groups/raw-%d", readers), func(ctx context.Context, res *groupRead) error {
		res.readers = readers
		return readConcurrently(readers, res, func(r int, part *groupRead) error {
			return b.rawReader(ctx, topicID, gid, r, readers, part)
		})
	})
}

// readConcurrently runs read for readers 0 .. readers-1 at once, each
// counting into a groupRead of its own, then adds them all to res. It
// returns the first error.
func readConcurrently(readers int, res *groupRead, read func(r int, part *groupRead) error) error {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var part groupRead
			err := read(r, &part)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			res.add(part)
		}()
	}
	wg.Wait()
	return firstErr
}

// add counts a reader's part of a run into the run.
func (r *groupRead) add(p groupRead) {
	r.events += p.events
	r.requests += p.requests
	r.commits += p.commits
	r.fenced += p.fenced
	r.read = append(r.read, p.read...)
	r.commit = append(r.commit, p.commit...)
	r.decode += p.decode
}

// rawReader is reader r of readers on the raw side: it takes the
// partitions p with p mod readers = r, round-robin a batch at a time,
// until each range read comes back empty.
func (b *Bench) rawReader(ctx context.Context, topicID, gid int64, r, readers int, part *groupRead) error {
	var (
		parts []int
		next  = map[int]int64{}
	)
	for p := r; p < topicPartitions; p += readers {
		parts = append(parts, p)
	}
	for i := 0; len(parts) > 0; i++ {
		p := parts[i%len(parts)]
		t0 := time.Now()
		got, last, err := b.rawRangeRead(ctx, topicID, p, next[p])
		if err != nil {
			return err
		}
		part.requests++
		part.read = append(part.read, time.Since(t0))
		if got == 0 { // the end of this partition
			parts = slices.DeleteFunc(parts, func(q int) bool { return q == p })
			i--
			continue
		}
		t1 := time.Now()
		if _, err := b.raw.Exec(ctx, rawGroupCommit, gid, p, last); err != nil {
			return err
		}
		part.commit = append(part.commit, time.Since(t1))
		part.commits++
		part.events += got
		next[p] = last + 1
	}
	return nil
}

// rawRangeRead reads a batch of a partition from an offset, scanning every
// column, and returns the rows read and the last offset.
func (b *Bench) rawRangeRead(ctx context.Context, topicID int64, p int, from int64) (got, last int64, err error) {
	rows, err := b.raw.Query(ctx, rawGroupRead, topicID, p, from, groupBatch)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, typ          string
			key, data, attrs *string
			partition        int32
			off              int64
			publishedAt      time.Time
		)
		if err := rows.Scan(&id, &typ, &key, &data, &attrs, &partition, &off, &publishedAt); err != nil {
			return 0, 0, err
		}
		got++
		last = off
	}
	return got, last, rows.Err()
}

// memberName is the consumer id of a group's m-th member.
func memberName(m int) string { return fmt.Sprintf("member-%d", m) }

// joinGroup makes members members join a new group (start earliest) one
// after another, each with a poll of max_events 1 that it commits, so that
// the assignment is settled (one rebalance per join) before a measured
// run. It returns the events the joins read.
func joinGroup(ctx context.Context, c *FerryClient, topic, group string, members int) (int64, error) {
	var joined int64
	for m := range members {
		r, err := c.GroupPoll(ctx, topic, group, groupPollRequest{
			Consumer: memberName(m), MaxEvents: 1, SessionTimeoutSeconds: groupSession, Start: "earliest"})
		if err != nil {
			return 0, fmt.Errorf("join: %w", err)
		}
		if len(r.Events) > 0 {
			if err := c.GroupCommit(ctx, topic, group, memberName(m), r.Generation, lastOffsets(r.Events)); err != nil {
				return 0, fmt.Errorf("join commit: %w", err)
			}
		}
		joined += int64(len(r.Events))
	}
	return joined, nil
}

// ferryGroupRead reads the whole topic through a new group (start
// earliest) with the given number of members. The members first join one
// after another, each with a poll of max_events 1 (committed), so the
// assignment is settled (one rebalance per join) before the measured run;
// then every member polls max_events 1000 and commits after each poll,
// concurrently, until a poll comes back empty.
func (b *Bench) ferryGroupRead(ctx context.Context, topic, group string, members int, total int64) (groupRead, error) {
	joined, err := joinGroup(ctx, b.client, topic, group, members)
	if err != nil {
		return groupRead{}, err
	}
	res, err := b.measureGroupRead(ctx, fmt.Sprintf("groups/ferry-%d", members), func(ctx context.Context, res *groupRead) error {
		res.readers, res.joined = members, joined
		return readConcurrently(members, res, func(m int, part *groupRead) error {
			return b.ferryMember(ctx, topic, group, m, part)
		})
	})
	if err != nil {
		return res, err
	}
	d, err := b.client.DescribeGroup(ctx, topic, group)
	if err != nil {
		return res, fmt.Errorf("describe: %w", err)
	}
	var lag int64
	var detail []string
	for _, p := range d.Partitions {
		lag += p.Lag
		detail = append(detail, fmt.Sprintf("p%d %s/%s", p.Partition, fmtInt(p.CommittedOffset+1), fmtInt(p.HeadOffset+1)))
	}
	res.drained = lag == 0 && len(d.Partitions) == topicPartitions && res.events+res.joined == total && res.fenced == 0
	res.drainDetail = fmt.Sprintf("lag %d; committed/head per partition: %s; %s events read + %d at join, %d fenced commits",
		lag, strings.Join(detail, ", "), fmtInt(res.events), res.joined, res.fenced)
	if !res.drained {
		progress("  %s: not drained cleanly: %s", group, res.drainDetail)
	}
	return res, nil
}

// ferryMember is member m of a measured Ferry run: it polls max_events
// 1000 (no wait), decoding every field, and commits after each poll,
// until a poll comes back empty.
func (b *Bench) ferryMember(ctx context.Context, topic, group string, m int, part *groupRead) error {
	req, err := json.Marshal(groupPollRequest{Consumer: memberName(m), MaxEvents: groupBatch, SessionTimeoutSeconds: groupSession})
	if err != nil {
		return err
	}
	for {
		t0 := time.Now()
		out, err := b.client.do(ctx, http.MethodPost, groupPath(topic, group)+"/poll", req, http.StatusOK)
		if err != nil {
			return err
		}
		t1 := time.Now()
		var r groupPollReply
		if err := json.Unmarshal(out, &r); err != nil {
			return err
		}
		t2 := time.Now()
		part.requests++
		part.read = append(part.read, t2.Sub(t0))
		part.decode += t2.Sub(t1)
		if len(r.Events) == 0 {
			return nil
		}
		err = b.client.GroupCommit(ctx, topic, group, memberName(m), r.Generation, lastOffsets(r.Events))
		part.commit = append(part.commit, time.Since(t2))
		switch {
		case errors.Is(err, errFenced):
			part.fenced++ // the new owner reads them again
		case err != nil:
			return err
		default:
			part.commits++
			part.events += int64(len(r.Events))
		}
	}
}

// fillGroupTopic fills the topic with n events through the raw pool with
// scenario 8's raw batch publish (batches of 1000 in one transaction each,
// 4 writers: dense offsets), checks the offsets, then VACUUM ANALYZE and a
// checkpoint. It returns the events per partition.
func (b *Bench) fillGroupTopic(ctx context.Context, topicID int64, n int) ([]int64, error) {
	started := time.Now()
	keys := eventKeys()
	data := bodies(groupBatch)
	var next atomic.Int64
	err := runCounted(ctx, "groups/fill", 4, int64(n/groupBatch), func(ctx context.Context) error {
		i := next.Add(1) - 1
		batch := make([]string, groupBatch)
		for j := range batch {
			batch[j] = keys[(i*groupBatch+int64(j))%int64(len(keys))]
		}
		return rawPublishBatch(ctx, b, topicID, batch, data)
	})
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	if _, err := b.checkDensity(ctx, "fill", topicID); err != nil {
		return nil, err
	}
	rows, err := b.raw.Query(ctx, `SELECT next_offset FROM ferry.topic_partitions WHERE topic_id = $1 ORDER BY partition`, topicID)
	if err != nil {
		return nil, err
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if _, err := b.raw.Exec(ctx, `VACUUM ANALYZE ferry.events`); err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}
	progress("  filled %s events in %s (per partition %v)", fmtInt(int64(n)), time.Since(started).Round(100*time.Millisecond), sizes)
	return sizes, nil
}

// groupLatency is part 2's outcome.
type groupLatency struct {
	publishLatency // publish → the poll answer carrying the event
	latencyPolls   // in the measured window
	stmts          stmtList
	stmtsOK        bool
	elapsed        time.Duration
}

// latencyPolls counts the long-polling member's polls.
type latencyPolls struct {
	polls, pollsWithEvents int64
	commits                int64
	// emptyPolls answered without events, and their mean duration: with
	// events every 10 ms, a working long poll has none.
	emptyPolls int64
	emptyMean  time.Duration
}

// latencyMember is part 2's member: it long-polls and commits after every
// poll that returned events, recording the events' arrivals, until ctx
// ends or a request fails.
type latencyMember struct {
	polls, pollsWithEvents, commits atomic.Int64
	emptyPolls, emptyNanos          atomic.Int64
}

func (b *Bench) runLatencyMember(ctx context.Context, topic, group, member string, m *latencyMember, a *arrivals) {
	for ctx.Err() == nil {
		sent := time.Now()
		r, err := b.client.GroupPoll(ctx, topic, group, groupPollRequest{
			Consumer: member, MaxEvents: groupBatch, WaitSeconds: groupWait, SessionTimeoutSeconds: groupSession})
		at := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				a.fail(err)
			}
			return
		}
		m.polls.Add(1)
		if len(r.Events) == 0 {
			m.emptyPolls.Add(1)
			m.emptyNanos.Add(int64(at.Sub(sent)))
			continue
		}
		m.pollsWithEvents.Add(1)
		for _, e := range r.Events {
			a.record(e.ID, at)
		}
		if err := b.client.GroupCommit(ctx, topic, group, member, r.Generation, lastOffsets(r.Events)); err != nil {
			if ctx.Err() == nil {
				a.fail(fmt.Errorf("commit: %w", err))
			}
			return
		}
		m.commits.Add(1)
	}
}

// since is what the member did since an earlier reading.
func (m *latencyMember) since(earlier latencyPolls, emptyNanos int64) latencyPolls {
	p := latencyPolls{polls: m.polls.Load() - earlier.polls, pollsWithEvents: m.pollsWithEvents.Load() - earlier.pollsWithEvents,
		commits: m.commits.Load() - earlier.commits, emptyPolls: m.emptyPolls.Load() - earlier.emptyPolls}
	if p.emptyPolls > 0 {
		p.emptyMean = time.Duration((m.emptyNanos.Load() - emptyNanos) / p.emptyPolls)
	}
	return p
}

// measureGroupLatency runs part 2: one member long-polls (wait_seconds 10)
// and commits after every poll that returned events, while single events
// are published at groupRate.
func (b *Bench) measureGroupLatency(ctx context.Context, d time.Duration) (groupLatency, error) {
	var out groupLatency
	const topic, group, member = "bench-groups-latency", "latency", "member-0"
	if _, err := b.createTopic(ctx, topic); err != nil {
		return out, err
	}
	// Join (creates the group at the head of the empty topic).
	if _, err := b.client.GroupPoll(ctx, topic, group, groupPollRequest{
		Consumer: member, MaxEvents: groupBatch, SessionTimeoutSeconds: groupSession, Start: "latest"}); err != nil {
		return out, fmt.Errorf("join: %w", err)
	}
	var (
		m                latencyMember
		arrived          = newArrivals()
		cwg              sync.WaitGroup
		cctx, stopMember = context.WithCancel(ctx)
	)
	cwg.Add(1)
	go pprof.Do(cctx, pprof.Labels("role", "client", "load", "groups/latency-consumer"), func(ctx context.Context) {
		defer cwg.Done()
		b.runLatencyMember(ctx, topic, group, member, &m, arrived)
	})
	defer func() {
		stopMember()
		cwg.Wait()
	}()

	keys := eventKeys()
	warm, err := b.warmUp(ctx, topic, "evt_grp_warmup", groupRate, keys, arrived, "polled")
	if err != nil {
		return out, err
	}
	var pubs []timedPublish
	measure := func() error {
		before := latencyPolls{polls: m.polls.Load(), pollsWithEvents: m.pollsWithEvents.Load(), commits: m.commits.Load(), emptyPolls: m.emptyPolls.Load()}
		emptyNanos := m.emptyNanos.Load()
		var err error
		pubs, out.elapsed, err = b.publishAndAwait(ctx, topic, "evt_grp", int(d.Seconds()*groupRate), groupRate, keys, arrived, warm)
		out.latencyPolls = m.since(before, emptyNanos)
		return err
	}
	if out.stmts, out.stmtsOK, err = b.countStatements(ctx, false, measure); err != nil {
		return out, err
	}
	out.publishLatency = tallyPublishes(pubs, arrived)
	progress("  publish → poll: p50 %s p99 %s max %s (%d of %d received, %d polls)",
		fmtMs(out.latency.P50), fmtMs(out.latency.P99), fmtMs(out.latency.Max), out.arrived, out.published, out.polls)
	return out, nil
}

// rebalance is part 3's outcome.
type rebalance struct {
	stoppedAt          time.Time     // T: B's last poll answered
	took               time.Duration // T → A's first answer listing every partition
	evictingPollSentAt time.Duration // T → that poll sent (its transaction evicted B)
	lastSeenB          time.Duration // B's last_seen before T (its last fetch)
	genAtT, genAfter   int64
	gensSeenAfter      int // distinct generations in A's answers after T
	interval           time.Duration
	pollMean           time.Duration // mean duration of A's polls (all empty)
	timeline           [][]string
	members            string // describe afterwards
	ok                 bool
}

// measureRebalance runs part 3: members A and B poll in a loop; B stops;
// the bench waits until A's poll answer lists every partition.
func (b *Bench) measureRebalance(ctx context.Context) (rebalance, error) {
	var out rebalance
	const topic, group = "bench-groups-rebalance", "rebalance"
	if _, err := b.createTopic(ctx, topic); err != nil {
		return out, err
	}
	pair, lastB, err := b.settledPair(ctx, topic, group, groupBatch)
	if err != nil {
		return out, err
	}
	defer pair.close()
	out.stoppedAt, out.genAtT = lastB.at, lastB.generation
	// B's last_seen as the group recorded it, read before A's polls
	// evict B (which deletes the row).
	var lastSeen time.Time
	if err := b.raw.QueryRow(ctx, `
		SELECT m.last_seen FROM ferry.group_members m
		JOIN ferry.consumer_groups g ON g.id = m.group_id
		JOIN ferry.topics t ON t.id = g.topic_id
		WHERE t.name = $1 AND g.name = $2 AND m.consumer = 'member-b'`, topic, group).Scan(&lastSeen); err == nil {
		out.lastSeenB = lastSeen.Sub(out.stoppedAt)
	} else {
		progress("  member B's last_seen: %v", err)
	}
	progress("  member B stopped (generation %d); waiting for member A to own all %d partitions", out.genAtT, topicPartitions)

	got, err := pair.firstOfA(ctx, "member A owning every partition", time.Duration(rebalanceSession+10)*time.Second, out.stoppedAt,
		func(p memberPoll) bool { return len(p.partitions) == topicPartitions })
	if err != nil {
		return out, err
	}
	out.took = got.at.Sub(out.stoppedAt)
	out.evictingPollSentAt = got.sent.Sub(out.stoppedAt)
	out.genAfter = got.generation

	gens := map[int64]bool{}
	var (
		starts []time.Time
		took   time.Duration
		shown  []memberPoll // A's polls from the last before T to the one that got every partition
	)
	all, _ := pair.a.snapshot()
	for i, p := range all {
		starts = append(starts, p.sent)
		took += p.at.Sub(p.sent)
		if p.at.After(out.stoppedAt) && !p.at.After(got.at) {
			gens[p.generation] = true
		}
		if !p.at.After(got.at) && (p.at.After(out.stoppedAt) || (i+1 < len(all) && all[i+1].at.After(out.stoppedAt))) {
			shown = append(shown, p)
		}
	}
	out.gensSeenAfter = len(gens)
	if len(starts) > 1 {
		out.interval = starts[len(starts)-1].Sub(starts[0]) / time.Duration(len(starts)-1)
	}
	if len(all) > 0 {
		out.pollMean = took / time.Duration(len(all))
	}
	row := func(p memberPoll) []string {
		return []string{
			fmt.Sprintf("%+.3f s", p.sent.Sub(out.stoppedAt).Seconds()),
			fmt.Sprintf("%+.3f s", p.at.Sub(out.stoppedAt).Seconds()),
			strconv.FormatInt(p.generation, 10),
			fmt.Sprint(p.partitions),
		}
	}
	const keep = 4 // polls shown at each end of a long timeline
	for i, p := range shown {
		if len(shown) > 2*keep+1 && i == keep {
			mid := shown[keep : len(shown)-keep]
			out.timeline = append(out.timeline, []string{
				fmt.Sprintf("… %d more polls …", len(mid)),
				fmt.Sprintf("%+.3f s … %+.3f s", mid[0].at.Sub(out.stoppedAt).Seconds(), mid[len(mid)-1].at.Sub(out.stoppedAt).Seconds()),
				"", ""})
		}
		if len(shown) > 2*keep+1 && i >= keep && i < len(shown)-keep {
			continue
		}
		out.timeline = append(out.timeline, row(p))
	}
	d, err := b.client.DescribeGroup(ctx, topic, group)
	if err != nil {
		return out, fmt.Errorf("describe: %w", err)
	}
	var ms []string
	for _, m := range d.Members {
		ms = append(ms, fmt.Sprintf("%s %v", m.Consumer, m.Partitions))
	}
	out.members = fmt.Sprintf("generation %d; members: %s", d.Generation, strings.Join(ms, ", "))
	out.ok = len(d.Members) == 1 && d.Members[0].Consumer == "member-a" && len(d.Members[0].Partitions) == topicPartitions
	progress("  rebalance: %s after B stopped (evicting poll sent at +%s), generation %d → %d",
		out.took.Round(time.Millisecond), out.evictingPollSentAt.Round(time.Millisecond), out.genAtT, out.genAfter)
	return out, nil
}

func (b *Bench) groups(ctx context.Context) (*Section, error) {
	n, publishFor := b.groupSizes()
	stop, err := b.trackStatements(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	const readTopic = "bench-groups-read"
	topics := []string{readTopic, "bench-groups-latency", "bench-groups-rebalance"}
	defer func() {
		// Empty tables first: the topics' cleanup jobs then find nothing.
		cctx := context.WithoutCancel(ctx)
		if _, err := b.raw.Exec(cctx, `TRUNCATE ferry.events, ferry.event_dedup`); err != nil {
			progress("  truncate: %v", err)
		}
		for _, t := range topics {
			if err := b.deleteTopic(cctx, t); err != nil && !strings.Contains(err.Error(), "status 404") {
				progress("  delete topic %s: %v", t, err)
			}
		}
	}()
	if err := b.resetTopics(ctx); err != nil {
		return nil, err
	}
	tid, err := b.createTopic(ctx, readTopic)
	if err != nil {
		return nil, err
	}
	if err := warmPool(ctx, b.raw, topicPartitions); err != nil {
		return nil, err
	}
	progress("  filling %s events, batches of %d", fmtInt(int64(n)), groupBatch)
	sizes, err := b.fillGroupTopic(ctx, tid, n)
	if err != nil {
		return nil, err
	}

	// Part 1, in the order raw 1, Ferry 1, Ferry 4, raw 4.
	progress("  read everything: 1 reader, then 4")
	raw1, err := b.rawGroupRead(ctx, tid, "raw-1", 1)
	if err != nil {
		return nil, err
	}
	ferry1, err := b.ferryGroupRead(ctx, readTopic, "ferry-1", 1, int64(n))
	if err != nil {
		return nil, err
	}
	ferry4, err := b.ferryGroupRead(ctx, readTopic, "ferry-4", 4, int64(n))
	if err != nil {
		return nil, err
	}
	raw4, err := b.rawGroupRead(ctx, tid, "raw-4", 4)
	if err != nil {
		return nil, err
	}
	if raw1.events != int64(n) || raw4.events != int64(n) {
		return nil, fmt.Errorf("raw readers read %d and %d events, not %d", raw1.events, raw4.events, n)
	}
	// The read topic's 200k events stay out of parts 2 and 3.
	if _, err := b.raw.Exec(ctx, `TRUNCATE ferry.events, ferry.event_dedup`); err != nil {
		return nil, err
	}
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}

	progress("  publish → poll latency: one long-polling member, %d events/s for %s", groupRate, publishFor)
	lat, err := b.measureGroupLatency(ctx, publishFor)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}

	progress("  rebalance after a member stops (session timeout %d s, wait %d s)", rebalanceSession, rebalanceWait)
	reb, err := b.measureRebalance(ctx)
	if err != nil {
		return nil, fmt.Errorf("rebalance: %w", err)
	}

	rows := groupReadRows(raw1, ferry1)
	rows = append(rows, groupReadRows(raw4, ferry4)...)
	rows = append(rows, groupLatencyRows(lat)...)
	rows = append(rows, rebalanceRows(reb)...)

	var grids []Grid
	var notes []string
	if ferry1.stmtsOK {
		grids = append(grids, stmtGrid(
			fmt.Sprintf("Part 1, Ferry, 1 member: the statements of the measured run (%s polls of up to %d events, each followed by a commit but the last)",
				fmtInt(ferry1.requests), groupBatch), ferry1.stmts, ferry1.requests, "per poll", 20))
	}
	if lat.stmtsOK {
		group, _ := splitPublishing(lat.stmts)
		grids = append(grids, stmtGrid(
			fmt.Sprintf("Part 2: the member's statements in the measured window, publishing's left out (%s polls, %s of them with events, %s events)",
				fmtInt(lat.polls), fmtInt(lat.pollsWithEvents), fmtInt(int64(lat.arrived))), group, max(lat.polls, 1), "per poll", 20))
	}
	grids = append(grids, Grid{
		Caption: fmt.Sprintf("Part 3: member A's polls from the last one answered before T (B's last poll answered) to the first listing every partition; times relative to T, B's last_seen at %+.3f s",
			reb.lastSeenB.Seconds()),
		Header: []string{"poll sent", "answered", "generation", "partitions"},
		Rows:   reb.timeline,
	})
	if !ferry1.stmtsOK {
		notes = append(notes, "**Statements skipped:** "+b.statementsReason+".")
	}
	notes = append(notes, groupNotes(raw1, ferry1, ferry4, lat, reb)...)

	return &Section{
		Rows:  rows,
		Grids: grids,
		Notes: notes,
		How: fmt.Sprintf("**Read throughput (part 1):** one %d-partition topic created through the API, filled with %s events (partitions %v) through the raw pool with "+
			"scenario 8's raw batch publish (batches of %d keyed events, one transaction each, 4 writers, offsets checked dense), then VACUUM ANALYZE and a CHECKPOINT. "+
			"Four runs read all of it, each after a CHECKPOINT, in the order raw 1 reader, Ferry 1 member, Ferry 4 members, raw 4 readers (the table is in shared buffers throughout). "+
			"Ferry: a new group per run (`start: earliest`); its members first join one after another with a poll of `max_events` 1 (committed, not counted), so that the "+
			"assignment is settled before the measured run; then every member (its own consumer id) loops `POST .../poll` `{\"max_events\": %d, \"wait_seconds\": 0, "+
			"\"session_timeout_seconds\": %d}`, decodes every field of the answer, and `POST .../commit`s the highest offset per partition, until a poll comes back empty; "+
			"afterwards the group is described and every partition's lag must be 0. Raw: reader r of R reads the partitions p with p mod R = r, round-robin a batch at a time, "+
			"with `SELECT id, type, key, data::text, attributes::text, partition, \"offset\", published_at FROM ferry.events WHERE topic_id = $1 AND partition = $2 AND \"offset\" >= $3 "+
			"ORDER BY \"offset\" LIMIT %d` (the columns Ferry reads), then `UPDATE ferry.group_partitions SET committed_offset = $3, fetch_offset = $3 + 1 WHERE group_id = $1 AND partition = $2` "+
			"(the position row of a group the bench inserts into Ferry's tables), each its own autocommit statement. Events/s = events read in the run ÷ its wall time "+
			"(first poll to the last member's empty poll). CPU, WAL, transactions and waits as in scenarios 1-3, over the run. "+
			"pg_stat_statements (track = top) is on for the whole scenario, on both sides, and reset around each run and part 2's window; the bench's own sampling statements are left out. "+
			"**Publish → poll latency (part 2):** a new topic; one member long-polls `{\"max_events\": %d, \"wait_seconds\": %d, \"session_timeout_seconds\": %d}` in a loop "+
			"and commits after every poll that returned events; single-event publishes (`POST /v1/topics/{t}/events`, client-given ids) start from a schedule at %d events/s "+
			"for %s (open loop, each in its own goroutine), after a %s warm-up at the same rate, all polled first. Latency = the time the poll answer carrying the event was read "+
			"− the time just before its publish request was sent; every event must arrive within 10 s of the last publish. "+
			"**Rebalance (part 3):** a new topic, nothing published; members A and B each loop polls `{\"wait_seconds\": %d, \"session_timeout_seconds\": %d}`. "+
			"Once both answers list 2 partitions in the same generation, B stops after its current poll; T is when that last poll was answered. The time reported is T → the "+
			"first answer to A that lists all %d partitions. Eviction is lazy: B's session expires %d s after its last_seen (updated by its last fetch, just before T), and "+
			"the first poll of A that starts after that evicts it in its first transaction and lists the new partitions, but, nothing being published, is answered only after "+
			"its %d s wait; so ≈ %d s + up to one poll interval (≈ %d s) + %d s is expected.",
			topicPartitions, fmtInt(int64(n)), sizes, groupBatch, groupBatch, groupSession, groupBatch,
			groupBatch, groupWait, groupSession, groupRate, publishFor, time.Second/2,
			rebalanceWait, rebalanceSession, topicPartitions, rebalanceSession, rebalanceWait,
			rebalanceSession, rebalanceWait, rebalanceWait),
	}, nil
}

// groupReadRows are part 1's rows for one reader count.
func groupReadRows(raw, ferry groupRead) []Row {
	what := fmt.Sprintf("read, %d readers / members: ", raw.readers)
	if raw.readers == 1 {
		what = "read, 1 reader / member: "
	}
	rp, fp := raw.phase(), ferry.phase()
	perReq := func(r groupRead, n int64) string {
		if r.requests == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", float64(n)/float64(r.requests))
	}
	pct := func(d []time.Duration) string {
		s := Summarize(d)
		return fmtMs(s.P50) + " / " + fmtMs(s.P99)
	}
	rows := []Row{
		{Metric: what + "throughput (events read and committed)", Raw: fmtRateOf(raw.rate(), events), Ferry: fmtRateOf(ferry.rate(), events),
			Ratio: ratioOf(ferry.rate(), raw.rate()), Target: "—"},
		{Metric: what + "events, wall time", Raw: fmt.Sprintf("%s in %s", fmtInt(raw.events), raw.elapsed.Round(time.Millisecond)),
			Ferry: fmt.Sprintf("%s in %s", fmtInt(ferry.events), ferry.elapsed.Round(time.Millisecond))},
		{Metric: what + "range reads (raw) / polls (Ferry), events each", Raw: fmt.Sprintf("%s, %s", fmtInt(raw.requests), perReq(raw, raw.events)),
			Ferry: fmt.Sprintf("%s, %s", fmtInt(ferry.requests), perReq(ferry, ferry.events))},
		{Metric: what + "read latency p50 / p99 (raw SELECT; Ferry poll request, answer decoded)", Raw: pct(raw.read), Ferry: pct(ferry.read)},
		{Metric: what + "commit latency p50 / p99 (raw UPDATE; Ferry commit request)", Raw: pct(raw.commit), Ferry: pct(ferry.commit)},
		{Metric: what + "CPU cores in use", Raw: fmtCPU(raw.win.CPU), Ferry: fmtCPU(ferry.win.CPU)},
		{Metric: what + "PostgreSQL CPU-ms per 1,000 events", Raw: cpuPer(raw.win.CPU.PG, rp, raw.win.CPU.PGKnown), Ferry: cpuPer(ferry.win.CPU.PG, fp, ferry.win.CPU.PGKnown),
			Ratio: ratioOf(ferry.win.CPU.PG/ferry.rate(), raw.win.CPU.PG/raw.rate())},
		{Metric: what + "bench-process CPU-ms per 1,000 events", Raw: cpuPer(raw.win.CPU.Self, rp, true), Ferry: cpuPer(ferry.win.CPU.Self, fp, true),
			Ratio: ratioOf(ferry.win.CPU.Self/ferry.rate(), raw.win.CPU.Self/raw.rate())},
		{Metric: what + "WAL bytes per event", Raw: fmt.Sprintf("%.1f", rp.WALPerMessage()), Ferry: fmt.Sprintf("%.1f", fp.WALPerMessage()),
			Ratio: ratioOf(fp.WALPerMessage(), rp.WALPerMessage())},
		{Metric: what + "write transactions per range read / poll", Raw: perReq(raw, raw.win.WriteXacts), Ferry: perReq(ferry, ferry.win.WriteXacts),
			Ratio: ratioOf(float64(ferry.win.WriteXacts)/float64(max(ferry.requests, 1)), float64(raw.win.WriteXacts)/float64(max(raw.requests, 1)))},
		{Metric: what + "PostgreSQL client backends: average active, and what they wait on", Raw: raw.win.Waits.String(), Ferry: ferry.win.Waits.String()},
	}
	if raw.stmtsOK && ferry.stmtsOK {
		rows = append(rows,
			Row{Metric: what + "SQL statements per range read / poll (with its commit)", Raw: perReq(raw, raw.stmts.calls()), Ferry: perReq(ferry, ferry.stmts.calls()),
				Ratio: ratioOf(float64(ferry.stmts.calls())/float64(max(ferry.requests, 1)), float64(raw.stmts.calls())/float64(max(raw.requests, 1)))},
			Row{Metric: what + "rows the read statement returns per range read / poll", Raw: fmt.Sprintf("%.0f", rowsPer(raw.stmts.tagged(rawGroupReadTag), raw.requests)),
				Ferry: fmt.Sprintf("%.0f (the member returns %.0f)", rowsPer(ferry.stmts.tagged(groupFetchTag), ferry.requests), float64(ferry.events)/float64(max(ferry.requests, 1)))},
			Row{Metric: what + "PostgreSQL execution ms per 1,000 events", Raw: fmt.Sprintf("%.1f", raw.stmts.execMs()*1000/float64(max(raw.events, 1))),
				Ferry: fmt.Sprintf("%.1f", ferry.stmts.execMs()*1000/float64(max(ferry.events, 1))),
				Ratio: ratioOf(ferry.stmts.execMs()/float64(max(ferry.events, 1)), raw.stmts.execMs()/float64(max(raw.events, 1)))},
		)
	}
	rows = append(rows, Row{Metric: what + "group drained (Ferry: lag 0 on every partition, every event committed once)", Raw: "—",
		Ferry: fmt.Sprintf("%s (%s)", map[bool]string{true: "yes", false: "**no**"}[ferry.drained], ferry.drainDetail)})
	return rows
}

// groupLatencyRows are part 2's rows.
func groupLatencyRows(l groupLatency) []Row {
	const what = "publish → poll: "
	rows := []Row{
		{Metric: what + "latency p50", Raw: "—", Ferry: fmtMs(l.latency.P50), Target: "—"},
		{Metric: what + "latency p90", Raw: "—", Ferry: fmtMs(l.latency.P90)},
		{Metric: what + "latency p99", Raw: "—", Ferry: fmtMs(l.latency.P99), Target: "—"},
		{Metric: what + "latency max", Raw: "—", Ferry: fmtMs(l.latency.Max)},
		{Metric: what + "events polled / published", Raw: "—",
			Ferry:  fmt.Sprintf("%s / %s (%d missing, %d publishes failed, %d polled twice)", fmtInt(int64(l.arrived)), fmtInt(int64(l.published)), l.published-l.arrived, l.failed, l.dups),
			Target: "= published", Pass: pass(l.arrived == l.published && l.failed == 0 && l.published > 0)},
		{Metric: what + "publish request latency p50 / p99", Raw: "—", Ferry: fmtMs(l.publish.P50) + " / " + fmtMs(l.publish.P99)},
		{Metric: what + "publish answered → poll answered p50 / p99", Raw: "—", Ferry: fmtMs(l.after.P50) + " / " + fmtMs(l.after.P99)},
		{Metric: what + "polls in the window (with events), commits, events per poll with events", Raw: "—",
			Ferry: fmt.Sprintf("%s (%s), %s, %.2f", fmtInt(l.polls), fmtInt(l.pollsWithEvents), fmtInt(l.commits),
				float64(l.arrived)/float64(max(l.pollsWithEvents, 1)))},
	}
	t, ok := verdict(fmt.Sprintf("0 (wait_seconds %d)", groupWait), l.emptyPolls == 0)
	rows = append(rows, Row{Metric: what + "polls answered without events in the window, their mean duration", Raw: "—",
		Ferry: fmt.Sprintf("%s, %s", fmtInt(l.emptyPolls), fmtMs(l.emptyMean)), Target: t, Pass: ok})
	if l.stmtsOK {
		group, publishing := splitPublishing(l.stmts)
		rows = append(rows,
			Row{Metric: what + "SQL statements of the member per poll (poll + its commit, when any)", Raw: "—",
				Ferry: fmt.Sprintf("%.1f (%.1f per event)", float64(group.calls())/float64(max(l.polls, 1)), float64(group.calls())/float64(max(l.arrived, 1)))},
			Row{Metric: what + "SQL statements of publishing per event (publish transactions, wake-up NOTIFYs; pipelined BEGIN/COMMIT not recorded)", Raw: "—",
				Ferry: fmt.Sprintf("%.1f", float64(publishing.calls())/float64(max(l.arrived, 1)))},
		)
	}
	return rows
}

// rebalanceRows are part 3's rows.
func rebalanceRows(r rebalance) []Row {
	const what = "rebalance: "
	return []Row{
		{Metric: what + "member B stops → member A's poll answer lists all partitions", Raw: "—", Ferry: fmt.Sprintf("%.2f s", r.took.Seconds()), Target: "—"},
		{Metric: what + "of which: until the poll that evicted B was sent (B's last_seen at T" + fmt.Sprintf("%+.3f s)", r.lastSeenB.Seconds()), Raw: "—",
			Ferry: fmt.Sprintf("%.2f s", r.evictingPollSentAt.Seconds())},
		func() Row {
			ok := r.pollMean >= 9*time.Second*rebalanceWait/10
			t, p := verdict(fmt.Sprintf("≈ %d s (wait_seconds)", rebalanceWait), ok)
			return Row{Metric: what + "member A's polls, nothing published: mean duration, mean interval", Raw: "—",
				Ferry: fmtMs(r.pollMean) + ", " + fmtMs(r.interval), Target: t, Pass: p}
		}(),
		{Metric: what + "generation changes after B stopped (generation at T → after)", Raw: "—",
			Ferry: fmt.Sprintf("%d (%d → %d; %d distinct generation(s) in A's answers after T)", r.genAfter-r.genAtT, r.genAtT, r.genAfter, r.gensSeenAfter)},
		{Metric: what + "group afterwards (describe)", Raw: "—", Ferry: r.members},
	}
}

// splitPublishing splits statements into the group member's and
// publishing's: the publish transactions (their tags, and their BEGIN and
// COMMIT) and the notifier's wake-up NOTIFYs.
func splitPublishing(stmts stmtList) (group, publishing stmtList) {
	tags := publishTags()
	for _, s := range stmts {
		if slices.Contains(tags, s.tag) || s.isTxControl() || s.isNotify() {
			publishing = append(publishing, s)
		} else {
			group = append(group, s)
		}
	}
	return group, publishing
}

// groupFetchTag is Ferry's fetch of a member's events, rawGroupReadTag the
// raw side's range read.
const groupFetchTag, rawGroupReadTag = "ferry:consumer_group_fetch", "raw:group_read"

// rowsPer is the rows the statements returned, per request.
func rowsPer(stmts stmtList, requests int64) float64 {
	return float64(stmts.rows()) / float64(max(requests, 1))
}

// groupNotes say where a poll's time goes, from the measured split.
func groupNotes(raw1, ferry1, ferry4 groupRead, l groupLatency, r rebalance) []string {
	var notes []string
	if ferry1.requests > 0 && len(ferry1.read) > 0 {
		mean := func(d []time.Duration) time.Duration {
			var s time.Duration
			for _, v := range d {
				s += v
			}
			return s / time.Duration(max(len(d), 1))
		}
		note := fmt.Sprintf("Where a poll cycle's time goes (part 1, 1 member): a poll request takes %s on average, of which the client's JSON decoding %s; "+
			"the commit request after it %s. ",
			fmtMs(mean(ferry1.read)), fmtMs(ferry1.decode/time.Duration(ferry1.requests)), fmtMs(mean(ferry1.commit)))
		if ferry1.stmtsOK {
			fetch := ferry1.stmts.tagged(groupFetchTag)
			fetchMs, fetchRows, fetchCalls := fetch.execMs(), float64(fetch.rows()), float64(fetch.calls())
			note += fmt.Sprintf("PostgreSQL executes %.1f ms of SQL per cycle (pg_stat_statements, commit waits excluded), %.1f ms of it the fetch, which returns "+
				"%.0f rows per call for the %.0f events a poll returns: it reads up to max_events from *each* owned partition (`LIMIT` inside the lateral join) and the "+
				"server keeps max_events of them, round-robin, so a member owning 4 partitions reads up to 4× what it returns. "+
				"The raw reader executes %.1f ms per batch of %d. The rest of a Ferry poll is the server's Go work (scanning and encoding %d events as JSON) and the "+
				"commits of its two write transactions.",
				ferry1.stmts.execMs()/float64(ferry1.requests), fetchMs/float64(ferry1.requests),
				fetchRows/max(fetchCalls, 1), float64(ferry1.events)/float64(max(ferry1.commits, 1)),
				raw1.stmts.execMs()/float64(max(raw1.requests, 1)), groupBatch, groupBatch)
		}
		notes = append(notes, note)
	}
	if ferry4.win.Waits.Samples > 0 {
		notes = append(notes, "With 4 members every poll still takes the group row's lock (`SELECT ... FROM ferry.consumer_groups ... FOR UPDATE`) "+
			"for its membership transaction, so the members' polls serialise on it for the length of that transaction, its commit included "+
			"(see the waits row: Lock:transactionid / Lock:tuple are waits on it).")
	}
	if r.pollMean < time.Second*rebalanceWait/2 || l.emptyPolls > 0 {
		notes = append(notes, fmt.Sprintf("**Long polling did not wait.** Member A's polls (wait_seconds %d, nothing published) were answered in %s on average, "+
			"and part 2's member got %s empty answers in its window (wait_seconds %d, an event every %s), so both members polled in a tight loop: part 3 measures "+
			"the session timeout alone (A polls continuously, so the first poll after B's session expired evicts it at once), and part 2 a busy-polling member. "+
			"The likely cause, in `store.groupFetch` at this revision: when the fetch finds nothing, the partitions to advance are a nil slice, which pgx sends as "+
			"NULL; `partition <> ALL(NULL)` is NULL, so the query that lists the partitions the member still owns returns none of them, `lost` is true, and "+
			"`longPoll` stops waiting at once (it also wrongly reports the partitions as lost). With that fixed, part 3 should show ≈ %d-%d s and part 2 "+
			"only polls that carry events.",
			rebalanceWait, fmtMs(r.pollMean), fmtInt(l.emptyPolls), groupWait, time.Second/groupRate,
			rebalanceSession+rebalanceWait, rebalanceSession+2*rebalanceWait))
	}
	if l.pollsWithEvents > 0 {
		notes = append(notes, fmt.Sprintf("Part 2: the member's loop is poll → commit → poll; of the p50 of %s from publish to poll answer, the publish request takes %s; "+
			"an event published while the member is between polls (committing, or in the membership transaction of its next poll) waits for the next fetch.",
			fmtMs(l.latency.P50), fmtMs(l.publish.P50)))
	}
	return notes
}
