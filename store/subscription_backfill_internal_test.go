package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// backfillTopic makes a topic of 2 partitions, publishes n keyed events
// (keys k0..k9), grows it to 4 partitions (which moves some keys to
// other partitions) and publishes n more, and subscribes sub (ordered or
// not, starting latest: nothing backfilled yet).
func backfillTopic(t *testing.T, pool *pgxpool.Pool, n int, ordered bool) (Topic, Subscription) {
	t.Helper()
	ctx := context.Background()
	tp, _, err := TopicUpsert(ctx, pool, "log", TopicPatch{Partitions: ptrTo(2)})
	require.NoError(t, err)
	publish := func(tp Topic, round int) {
		evs := make([]PublishEvent, n)
		for i := range evs {
			key := fmt.Sprintf("k%d", i%10)
			evs[i] = PublishEvent{ID: fmt.Sprintf("r%d-%04d", round, i), Type: "t", Key: &key}
		}
		_, _, err := EventPublish(ctx, pool, tp, evs)
		require.NoError(t, err)
	}
	publish(tp, 1)
	tp, _, err = TopicUpsert(ctx, pool, "log", TopicPatch{Partitions: ptrTo(4)})
	require.NoError(t, err)
	publish(tp, 2)
	f, err := ParseFilter(nil)
	require.NoError(t, err)
	s, _, _, err := SubscriptionUpsert(ctx, pool, tp, "sub", SubscriptionPatch{Filter: f, Ordered: &ordered})
	require.NoError(t, err)
	return tp, s
}

func ptrTo[T any](v T) *T { return &v }

// runLocked backfills s from the earliest event with b in one
// transaction, as an ordered subscription's creation does.
func runLocked(t *testing.T, pool *pgxpool.Pool, b *backfill) (int64, error) {
	t.Helper()
	ctx := context.Background()
	var n int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		heads, err := partitionHeads(ctx, tx, b.sub.TopicID)
		if err != nil {
			return err
		}
		ranges, err := b.ranges(ctx, tx, StartPosition{Earliest: true}, heads)
		if err != nil {
			return err
		}
		n, err = b.locked(ctx, tx, ranges)
		return err
	})
	return n, err
}

// requireDeliveredInPublishOrder checks that the subscription holds
// every event of the topic once and, per key, in publish order by id,
// with exactly the oldest not waiting.
func requireDeliveredInPublishOrder(t *testing.T, pool *pgxpool.Pool, tp Topic, s Subscription) {
	t.Helper()
	ctx := context.Background()
	var events, deliveries, distinct, disordered, heads int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.events WHERE topic_id = $1`, tp.ID).Scan(&events))
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*), count(DISTINCT (event_partition, event_offset)) FROM ferry.messages WHERE queue_id = $1`, s.ID).Scan(&deliveries, &distinct))
	require.Equal(t, events, deliveries, "every event delivered")
	require.Equal(t, deliveries, distinct, "none twice")
	if !s.Ordered {
		return
	}
	// Ids (the order a key's deliveries are claimed in) follow publish
	// order within each key, across partitions.
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT sent_at < lag(sent_at) OVER (PARTITION BY grp ORDER BY id) AS back
			FROM ferry.messages WHERE queue_id = $1
		) x WHERE back`, s.ID).Scan(&disordered))
	require.Zero(t, disordered, "deliveries of a key out of publish order")
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FROM ferry.messages m WHERE queue_id = $1 AND NOT waiting
			AND id = (SELECT min(id) FROM ferry.messages x WHERE x.queue_id = m.queue_id AND x.grp = m.grp)`, s.ID).Scan(&heads))
	var notWaiting int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND NOT waiting`, s.ID).Scan(&notWaiting))
	require.EqualValues(t, 10, heads, "each key's oldest delivery is its head")
	require.EqualValues(t, 10, notWaiting, "and the only one not waiting")
}

// An ordered backfill in many small windows delivers each key's events in
// publish order, also a key whose events lie in two partitions (the topic
// grew), as the one-statement backfill did.
func TestBackfillOrderedWindowsKeepPublishOrderAcrossPartitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	tp, s := backfillTopic(t, pool, 300, true)
	var moved int
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(*) FROM (SELECT key FROM ferry.events WHERE topic_id = $1 GROUP BY key HAVING count(DISTINCT partition) > 1) k`,
		tp.ID).Scan(&moved))
	require.Positive(t, moved, "some key lives in two partitions")

	b := newBackfill(s)
	b.window, b.maxWindow = 7, 7
	n, err := runLocked(t, pool, b)
	require.NoError(t, err)
	require.EqualValues(t, 600, n)
	requireDeliveredInPublishOrder(t, pool, tp, s)
}

// holdBigInserts makes every statement that inserts more than rows
// deliveries sleep past a backfill's timeout.
func holdBigInserts(t *testing.T, pool *pgxpool.Pool, rows int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), fmt.Sprintf(`
		CREATE FUNCTION public.test_slow() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT count(*) FROM changed) > %d THEN PERFORM pg_sleep(1); END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER test_slow AFTER INSERT ON ferry.messages
			REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.test_slow();`, rows))
	require.NoError(t, err)
}

// slowBackfill is a backfill of a new backfillTopic of n events a round
// in windows of window events with a 100 ms timeout, which an insert of
// more than held deliveries overruns (holdBigInserts).
func slowBackfill(t *testing.T, n int, ordered bool, held, window int) (*pgxpool.Pool, Topic, Subscription, *backfill) {
	t.Helper()
	pool := pgtest.NewPool(t)
	tp, s := backfillTopic(t, pool, n, ordered)
	holdBigInserts(t, pool, held)
	b := newBackfill(s)
	b.timeout, b.window, b.maxWindow = 100*time.Millisecond, window, window
	return pool, tp, s, b
}

// A backfill window that times out is rolled back and done again in
// halves: nothing is lost, nothing doubled, in either kind of backfill.
// Only when a single event cannot be delivered in time does the backfill
// stop, with ErrBackfillStopped, keeping what it delivered.
func TestBackfillWindowTimeoutHalves(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			pool, tp, s, b := slowBackfill(t, 60, ordered, 10, 64)
			var (
				n   int64
				err error
			)
			if ordered {
				n, err = runLocked(t, pool, b)
			} else {
				heads := map[int]int64{}
				for _, o := range mustOffsets(t, pool, tp) {
					heads[o.Partition] = o.HeadOffset + 1
				}
				var ranges []backfillRange
				ranges, err = b.ranges(context.Background(), pool, StartPosition{Earliest: true}, heads)
				require.NoError(t, err)
				n, err = b.batches(context.Background(), pool, ranges)
			}
			require.NoError(t, err)
			require.EqualValues(t, 120, n)
			requireDeliveredInPublishOrder(t, pool, tp, s)
		})
	}
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		pool, _, _, b := slowBackfill(t, 20, true, 0, 4)
		_, err := runLocked(t, pool, b)
		require.ErrorIs(t, err, ErrBackfillStopped)
		require.ErrorIs(t, err, ErrBusy)
	})
}

func mustOffsets(t *testing.T, pool *pgxpool.Pool, tp Topic) []PartitionOffsets {
	t.Helper()
	offs, err := TopicOffsets(context.Background(), pool, []int64{tp.ID})
	require.NoError(t, err)
	return offs[tp.ID]
}
