package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"
)

// Scenario 10, part 1: read a pre-filled topic through a group (one
// member, then four) against the same range reads in raw SQL.

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
