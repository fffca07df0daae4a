package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// DESIGN.md invariant 8: one delivery per event per subscription, also
// when the writers of a subscription's deliveries (the fan-out of
// publishes, a creation's backfill, a seek, a redrive) run at once.
// ferry.messages has no unique index by event position (it is
// partitioned), so these count what each event left.

// oncePool is a pool on a fresh database, large enough for the racing
// goroutines (pgtest.NewPool's default would serialise them).
func oncePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// onceTopic makes a topic of 4 partitions holding n events (keys k0..k9).
func onceTopic(t *testing.T, pool *pgxpool.Pool, n int) Topic {
	t.Helper()
	tp, _, err := TopicUpsert(context.Background(), pool, "once", TopicPatch{Partitions: ptrTo(4)})
	require.NoError(t, err)
	for i := 0; i < n; i += 100 {
		oncePublish(t, pool, tp, fmt.Sprintf("pre%d", i), min(100, n-i))
	}
	return tp
}

// oncePublish publishes n keyed events with ids prefix-0..prefix-(n-1).
func oncePublish(t *testing.T, pool *pgxpool.Pool, tp Topic, prefix string, n int) {
	t.Helper()
	require.NoError(t, oncePublishErr(pool, tp, prefix, n))
}

func oncePublishErr(pool *pgxpool.Pool, tp Topic, prefix string, n int) error {
	evs := make([]PublishEvent, n)
	for i := range evs {
		key := fmt.Sprintf("k%d", i%10)
		evs[i] = PublishEvent{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "t", Key: &key}
	}
	_, _, err := EventPublish(context.Background(), pool, tp, evs)
	return err
}

// racePublishes publishes from 3 goroutines, 8 batches of 20 each, while
// work runs, and returns work's error once all are done.
func racePublishes(t *testing.T, pool *pgxpool.Pool, tp Topic, work func() error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 3 {
		wg.Go(func() {
			for b := range 8 {
				if err := oncePublishErr(pool, tp, fmt.Sprintf("w%d-b%d", w, b), 20); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		if err := work(); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// requireOnce checks that the subscription holds every event of its topic
// exactly once, as a pending delivery or a dead letter.
func requireOnce(t *testing.T, pool *pgxpool.Pool, s Subscription) {
	t.Helper()
	var events, missing, twice int64
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(*), count(*) FILTER (WHERE n = 0), count(*) FILTER (WHERE n > 1) FROM (
			SELECT (SELECT count(*) FROM ferry.messages m
					WHERE m.queue_id = $2 AND m.event_partition = e.partition AND m.event_offset = e."offset")
				+ (SELECT count(*) FROM ferry.dead_letters d
					WHERE d.queue_id = $2 AND d.event_partition = e.partition AND d.event_offset = e."offset") AS n
			FROM ferry.events e WHERE e.topic_id = $1
		) x`, s.TopicID, s.ID).Scan(&events, &missing, &twice))
	require.Positive(t, events)
	require.Zero(t, twice, "events delivered more than once (of %d)", events)
	require.Zero(t, missing, "events not delivered (of %d)", events)
}

// A creation's backfill (in windows, while publishes go on) and the
// publishes' fan-out deliver each event once: the backfill stops at the
// heads the creation read under the partition locks.
func TestOnceBackfillRacingPublishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := oncePool(t)
	tp := onceTopic(t, pool, 600)
	var s Subscription
	racePublishes(t, pool, tp, func() error {
		var err error
		s, _, _, err = SubscriptionUpsert(ctx, pool, tp, "sub", SubscriptionPatch{Start: StartPosition{Earliest: true}})
		return err
	})
	requireOnce(t, pool, s)
}

// Seeks of an unordered subscription (which clear it and backfill it in
// windows while publishes go on) and the publishes' fan-out deliver each
// event once.
func TestOnceSeekRacingPublishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := oncePool(t)
	tp := onceTopic(t, pool, 600)
	s, _, _, err := SubscriptionUpsert(ctx, pool, tp, "sub", SubscriptionPatch{})
	require.NoError(t, err)
	racePublishes(t, pool, tp, func() error {
		for range 3 {
			if _, err := SubscriptionSeek(ctx, pool, s, StartPosition{Earliest: true}); err != nil {
				return err
			}
		}
		return nil
	})
	requireOnce(t, pool, s)
}

// Redrives of a subscription's dead letters (two at once) and the
// publishes' fan-out leave each event delivered once.
func TestOnceRedriveRacingPublishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := oncePool(t)
	tp := onceTopic(t, pool, 200)
	s, _, n, err := SubscriptionUpsert(ctx, pool, tp, "sub", SubscriptionPatch{
		Start: StartPosition{Earliest: true}, Queue: QueuePatch{MaxReceives: ptrTo(1)},
	})
	require.NoError(t, err)
	require.EqualValues(t, 200, n)
	// Each claimed with no lease, then dead-lettered by the next claim.
	var dead int64
	for range 20 {
		_, _, err := MessageClaim(ctx, pool, ClaimParams{Queue: s.Queue, Max: 100})
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.dead_letters WHERE queue_id = $1`, s.ID).Scan(&dead))
		if dead == 200 {
			break
		}
	}
	require.EqualValues(t, 200, dead)
	var redriven [2]int
	racePublishes(t, pool, tp, func() error {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r := range 2 {
			wg.Go(func() {
				for {
					n, err := DeadLetterRedrive(ctx, pool, RedriveParams{QueueID: s.ID, Limit: 20})
					redriven[r] += n
					if err != nil || n == 0 {
						errs[r] = err
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	require.Equal(t, 200, redriven[0]+redriven[1], "every dead letter redriven once")
	requireOnce(t, pool, s)
}

// An unordered subscription's creation backfill and a seek of the same
// subscription, at once, deliver each event once: both probe for the
// deliveries they would duplicate before they insert, so each window
// takes the subscription queue's lock (without it, the creation's
// windows and the seek's both delivered the same events).
func TestOnceCreationBackfillRacingSeek(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := oncePool(t)
	_, s := backfillTopic(t, pool, 150, false)
	for round := range 3 {
		var heads map[int]int64
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			heads, err = partitionHeads(ctx, tx, s.TopicID)
			return err
		}))
		var (
			wg               sync.WaitGroup
			fillErr, seekErr error
		)
		wg.Go(func() {
			// The creation's backfill (subscriptionBackfillBatches) in
			// small windows, so that the seek falls between them.
			b := newBackfill(s)
			b.window, b.maxWindow = 4, 4
			ranges, err := b.ranges(ctx, pool, StartPosition{Earliest: true}, heads)
			if err == nil {
				_, err = b.batches(ctx, pool, ranges)
			}
			fillErr = err
		})
		wg.Go(func() {
			for range 2 {
				if _, err := SubscriptionSeek(ctx, pool, s, StartPosition{Earliest: true}); err != nil {
					seekErr = err
					return
				}
			}
		})
		wg.Wait()
		require.NoError(t, fillErr, "round %d", round)
		require.NoError(t, seekErr, "round %d", round)
		requireOnce(t, pool, s)
	}
}
