package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// A subscription's Start applies to the request that creates it only. When
// a creating upsert's first attempt fails after planning its backfill (here
// a deadlock at commit, injected by a deferred trigger on the test's own
// database) and another request creates the subscription before the retry,
// the retry finds nothing to change: it did not create the subscription,
// so it backfills nothing, although its first attempt had planned to.
func TestSubscriptionUpsertRetryKeepsNoStaleBackfill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp := e.topic("t", store.TopicPatch{Partitions: ptr(1)})
	e.publish(tp, store.PublishEvent{Type: "old"}, store.PublishEvent{Type: "old"})
	// The first commit that creates a subscription named after a sequence
	// test_fail_<name> waits until another session waits for a lock, then
	// fails as a deadlock victim (retryable).
	_, err := e.pool.Exec(e.ctx, `
		CREATE FUNCTION public.test_fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			seq regclass := to_regclass('public.test_fail_' || NEW.name);
			give_up timestamptz := clock_timestamp() + interval '10 seconds';
		BEGIN
			IF seq IS NOT NULL AND nextval(seq) = 1 THEN
				WHILE NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
					AND pid <> pg_backend_pid() AND wait_event_type = 'Lock') LOOP
					IF clock_timestamp() > give_up THEN
						RAISE EXCEPTION 'no other session waited for a lock';
					END IF;
					PERFORM pg_sleep(0.001);
					PERFORM pg_stat_clear_snapshot(); -- read pg_stat_activity afresh
				END LOOP;
				RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01';
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER test_fail_first_commit AFTER INSERT ON ferry.queues
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.test_fail_first_commit();`)
	require.NoError(t, err)
	earliestPool, latestPool := e.newNamedPool(2, "earliest"), e.newNamedPool(2, "latest")
	// The retry and the other request race for the topic's lock once the
	// first attempt rolls back; only the round where the other request
	// wins shows the case. It almost always does (it was already waiting).
	for round := range 20 {
		name := fmt.Sprintf("s%d", round)
		_, err := e.pool.Exec(e.ctx, `CREATE SEQUENCE public.test_fail_`+name)
		require.NoError(t, err)
		type result struct {
			created    bool
			backfilled int64
			err        error
		}
		done := make(chan result, 1)
		go func() {
			_, created, n, err := store.SubscriptionUpsert(e.ctx, earliestPool, tp, name,
				store.SubscriptionPatch{Start: store.StartPosition{Earliest: true}})
			done <- result{created, n, err}
		}()
		// The first attempt is at its commit: the trigger polls.
		require.Eventually(t, func() bool {
			return e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND application_name = 'earliest' AND wait_event = 'PgSleep'`) > 0
		}, 10*time.Second, time.Millisecond)
		_, latestCreated, latestN, err := store.SubscriptionUpsert(e.ctx, latestPool, tp, name, store.SubscriptionPatch{})
		require.NoError(t, err)
		r := <-done
		require.NoError(t, r.err)
		if !latestCreated {
			continue // the retry won the lock and created it: not the case
		}
		require.Zero(t, latestN)
		require.False(t, r.created)
		s, err := store.SubscriptionGet(e.ctx, e.pool, tp.ID, name)
		require.NoError(t, err)
		require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, s.ID),
			"created with start latest, yet the retry of a request that did not create it backfilled")
		require.Zero(t, r.backfilled)
		return
	}
	t.Fatal("the other request never created the subscription first")
}
