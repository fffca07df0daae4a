package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// consumerTx is an application's transaction consuming through the SQL
// API (ferry.receive, later ferry.ack). Its deadlock_timeout is short and
// the maintenance sessions' (maintenancePool) a minute, so in a deadlock
// between the two PostgreSQL finds the cycle from this side and aborts
// this transaction: every deadlock shows as this transaction's 40P01.
type consumerTx struct {
	e      *env
	tx     pgx.Tx
	target string
}

// sqlReceived is a row of ferry.receive.
type sqlReceived struct {
	Receipt string
	Group   *string
}

func (e *env) consumerTx(target string) *consumerTx {
	e.t.Helper()
	tx := e.begin()
	_, err := tx.Exec(e.ctx, `SET LOCAL deadlock_timeout = '10ms'`)
	require.NoError(e.t, err)
	return &consumerTx{e: e, tx: tx, target: target}
}

// receive calls ferry.receive and requires n messages.
func (c *consumerTx) receive(n int) []sqlReceived {
	c.e.t.Helper()
	rows, err := c.tx.Query(c.e.ctx, `SELECT receipt, "group" FROM ferry.receive($1, $2)`, c.target, n)
	require.NoError(c.e.t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sqlReceived, error) {
		var m sqlReceived
		return m, r.Scan(&m.Receipt, &m.Group)
	})
	require.NoError(c.e.t, err)
	require.Len(c.e.t, got, n)
	return got
}

// ack calls ferry.ack and returns its error, requiring every receipt ok
// when there is none.
func (c *consumerTx) ack(msgs ...sqlReceived) error {
	c.e.t.Helper()
	receipts := each(msgs, func(m sqlReceived) string { return m.Receipt })
	rows, err := c.tx.Query(c.e.ctx, `SELECT status FROM ferry.ack($1, $2)`, c.target, receipts)
	if err != nil {
		return err
	}
	statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for i, s := range statuses {
		require.Equal(c.e.t, "ok", s, "receipt %d", i)
	}
	return nil
}

// maintenancePool is a pool whose sessions (application_name "maint")
// look for deadlocks only after a minute (see consumerTx).
func (e *env) maintenancePool() *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	require.NoError(e.t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "maint"
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "1min"
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(pool.Close)
	return pool
}

// byGroupKey returns groups a and b of queue queueID ordered by their
// group lock keys (the order in which every transaction takes them).
func (e *env) byGroupKey(queueID int64, a, b string) (lo, hi string) {
	e.t.Helper()
	var less bool
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT ferry.group_lock_key($1, $2) < ferry.group_lock_key($1, $3)`,
		queueID, a, b).Scan(&less))
	if less {
		return a, b
	}
	return b, a
}

// ofGroup returns the message of msgs in group g.
func ofGroup(t *testing.T, msgs []sqlReceived, g string) sqlReceived {
	t.Helper()
	for _, m := range msgs {
		if m.Group != nil && *m.Group == g {
			return m
		}
	}
	require.Failf(t, "no message of the group", "group %s", g)
	return sqlReceived{}
}

// maintenanceCase is one maintenance operation against the messages of
// groups "a" and "b" (two each) of a queue or subscription.
type maintenanceCase struct {
	name string
	// setup makes the queue (or subscription) with the messages and
	// returns its id and the SQL API's target.
	setup func(e *env) (queueID int64, target string)
	// op is the operation, on the maintenance pool.
	op func(e *env, pool *pgxpool.Pool, queueID int64) error
	// waits says whether op may wait for the consumer's transaction (a
	// purge or seek must remove what it holds; retention leaves it for
	// its next run).
	waits bool
	// finish removes what op left once the consumer committed.
	finish func(e *env, queueID int64)
}

func maintenanceCases() []maintenanceCase {
	queue := func(patch store.QueuePatch, backdate bool) func(e *env) (int64, string) {
		return func(e *env) (int64, string) {
			q := e.queue("locks", patch)
			ids := append(e.sendGroup(q, "a", 2), e.sendGroup(q, "b", 2)...)
			if backdate {
				e.backdate(q, ids...)
			}
			return q.ID, q.Name
		}
	}
	return []maintenanceCase{
		{
			name:  "Purge",
			setup: queue(store.QueuePatch{}, false),
			op: func(e *env, pool *pgxpool.Pool, queueID int64) error {
				return store.MessagePurge(e.ctx, pool, queueID)
			},
			waits:  true,
			finish: func(*env, int64) {},
		},
		{
			name:  "Retention",
			setup: queue(store.QueuePatch{RetentionSeconds: ptr(60)}, true),
			op: func(e *env, pool *pgxpool.Pool, _ int64) error {
				_, err := store.MessageExpire(e.ctx, pool, 100)
				return err
			},
			finish: func(e *env, _ int64) { e.expire(100) },
		},
		{
			// An unordered subscription whose deliveries have groups: made
			// while it was ordered.
			name: "Seek",
			setup: func(e *env) (int64, string) {
				tp := e.topic("locks", store.TopicPatch{Partitions: ptr(1)})
				s, _ := e.subscribe(tp, "sub", "", store.SubscriptionPatch{Ordered: ptr(true)})
				for _, k := range []string{"a", "a", "b", "b"} {
					e.publish(tp, store.PublishEvent{Type: "t", Key: ptr(k)})
				}
				_, _, _, err := store.SubscriptionUpsert(e.ctx, e.pool, tp, "sub", store.SubscriptionPatch{Ordered: ptr(false)})
				require.NoError(e.t, err)
				return s.ID, "locks/sub"
			},
			op: func(e *env, pool *pgxpool.Pool, queueID int64) error {
				s := e.subscriptionByID(queueID)
				_, err := store.SubscriptionSeek(e.ctx, pool, s, store.StartPosition{}) // latest
				return err
			},
			waits:  true,
			finish: func(*env, int64) {},
		},
	}
}

// subscriptionByID reads the subscription with the given id.
func (e *env) subscriptionByID(id int64) store.Subscription {
	e.t.Helper()
	subs, err := store.SubscriptionListAll(e.ctx, e.pool)
	require.NoError(e.t, err)
	for _, s := range subs {
		if s.ID == id {
			return s
		}
	}
	require.Failf(e.t, "no subscription", "id %d", id)
	return store.Subscription{}
}

// TestMaintenanceNoDeadlockWithConsumerTx: a purge, a retention sweep or
// a subscription seek that runs while an application's transaction holds
// grouped messages it received through the SQL API (their rows), and
// perhaps the lock of a group whose message it acked, never deadlocks
// with that transaction's acks: the application's transaction is never
// aborted, and the operation still does all it promises (a purge or seek
// removes what the transaction held once it commits; retention leaves it
// for its next run, and does not wait for it).
func TestMaintenanceNoDeadlockWithConsumerTx(t *testing.T) {
	t.Parallel()
	for _, mc := range maintenanceCases() {
		t.Run(mc.name, func(t *testing.T) {
			t.Parallel()
			t.Run("ReceivedThenAcked", func(t *testing.T) {
				t.Parallel()
				// The transaction holds both heads' rows; the operation
				// starts; the transaction acks both (taking both groups'
				// locks).
				e := newEnv(t)
				id, target := mc.setup(e)
				c := e.consumerTx(target)
				got := c.receive(2)
				mc.runAgainst(e, id, c, func() error { return c.ack(got...) })
			})
			t.Run("OneGroupAckedFirst", func(t *testing.T) {
				t.Parallel()
				// The transaction holds the lock of the group later in key
				// order (it acked that group's head) and the other head's
				// row; the operation starts; the transaction acks the
				// other head, taking the lock of the group earlier in key
				// order.
				e := newEnv(t)
				id, target := mc.setup(e)
				lo, hi := e.byGroupKey(id, "a", "b")
				c := e.consumerTx(target)
				got := c.receive(2)
				require.NoError(t, c.ack(ofGroup(t, got, hi)))
				mc.runAgainst(e, id, c, func() error { return c.ack(ofGroup(t, got, lo)) })
			})
		})
	}
}

// runAgainst starts the operation while c is open, waits until it
// finished or waits for a lock, has c do then (an ack, which must
// succeed), commits c, and checks that the operation succeeded and,
// with finish, left nothing.
func (mc maintenanceCase) runAgainst(e *env, queueID int64, c *consumerTx, then func() error) {
	t := e.t
	t.Helper()
	pool := e.maintenancePool()
	// On failure, end c before the pool closes (which waits for op).
	t.Cleanup(func() { _ = c.tx.Rollback(context.Background()) })
	done := make(chan error, 1)
	go func() { done <- mc.op(e, pool, queueID) }()
	outcome, finished := doneOrWaiting(t, done, func() (int, error) { return e.lockWaiters("maint") },
		"the operation neither finished nor waited for a lock")

	err := then()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		require.NotEqual(t, "40P01", pgErr.Code, "the application's transaction was aborted by a deadlock: %s", pgErr.Detail)
	}
	require.NoError(t, err)
	if !mc.waits {
		require.True(t, finished, "the operation waited for the application's transaction")
	}
	require.NoError(t, c.tx.Commit(context.Background()))
	require.NoError(t, outcome())
	mc.finish(e, queueID)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, queueID), "messages left")
	require.Zero(t, e.count(`SELECT coalesce(sum(messages), 0) FROM ferry.queue_counts WHERE queue_id = $1`, queueID),
		"depth counted")
}

// TestOrderedSeekWaitsOutsideTopicLocks: the seek of an ordered
// subscription (one transaction under the topic's partition locks) that
// meets a delivery an application's transaction received through the SQL
// API waits for that transaction without holding the topic: publishes to
// the topic go on meanwhile (an application that publishes over REST
// before it commits is not stalled by its own open transaction), and the
// seek ends once the transaction commits, with nothing left.
func TestOrderedSeekWaitsOutsideTopicLocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp := e.topic("ordered", store.TopicPatch{Partitions: ptr(1)})
	s, _ := e.subscribe(tp, "sub", "", store.SubscriptionPatch{Ordered: ptr(true)})
	for range 2 {
		e.publish(tp, store.PublishEvent{Type: "t", Key: ptr("k")})
	}
	// The pools first: on failure, c's rollback then comes before their
	// closes, which wait for the operations that wait for c.
	maint := e.maintenancePool()
	pub := e.newNamedPool(2, "pub")
	c := e.consumerTx("ordered/sub")
	got := c.receive(1)

	seekDone := inBackground(func(time.Time) error {
		_, err := store.SubscriptionSeek(e.ctx, maint, s, store.StartPosition{}) // latest
		return err
	})
	seekOutcome, _ := doneOrWaiting(t, seekDone, func() (int, error) { return e.lockWaiters("maint") },
		"the seek neither finished nor waited for a lock")

	pubDone := inBackground(func(time.Time) error {
		_, _, err := store.EventPublish(e.ctx, pub, tp, []store.PublishEvent{{Type: "t", Key: ptr("k")}})
		return err
	})
	pubOutcome, pubFinished := doneOrWaiting(t, pubDone, func() (int, error) { return e.lockWaiters("pub") },
		"the publish neither finished nor waited for a lock")
	require.True(t, pubFinished, "a publish waited for the seek, which waited for the application's transaction")
	require.NoError(t, pubOutcome())

	require.NoError(t, c.ack(got...))
	require.NoError(t, c.tx.Commit(e.ctx))
	require.NoError(t, seekOutcome())
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, s.ID),
		"seek to latest left deliveries")
}

// TestDedupExpireSkipsHeldRows: a send or publish that takes over a dedup
// id whose window has ended holds its row until its transaction ends (an
// application's transaction may stay open for minutes). The expiry sweeps
// do not wait for it: they delete every other expired id at once, and the
// held one (its takeover rolled back, so it is still expired) at the next
// sweep.
func TestDedupExpireSkipsHeldRows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// setup makes three expired ids "a", "b" and "c" and returns the
		// table's rows of them (a query counting them).
		setup func(e *env) (count string, id int64)
		// takeOver takes over "a" in tx.
		takeOver func(e *env, tx pgx.Tx)
		sweep    func(ctx context.Context, db store.DBTX, limit int) (int64, error)
	}{
		{
			name: "Messages",
			setup: func(e *env) (string, int64) {
				q := e.queue("dedup", store.QueuePatch{})
				for _, id := range []string{"a", "b", "c"} {
					m := msg(1)
					m.DedupID = id
					e.send(q, m)
				}
				_, err := e.pool.Exec(e.ctx, `UPDATE ferry.dedup SET expires_at = now() - interval '1 minute' WHERE queue_id = $1`, q.ID)
				require.NoError(e.t, err)
				return `SELECT count(*) FROM ferry.dedup WHERE queue_id = $1`, q.ID
			},
			takeOver: func(e *env, tx pgx.Tx) {
				got, err := sqlSend(e.ctx, tx, "dedup", `[{"body": 2, "dedup_id": "a"}]`)
				require.NoError(e.t, err)
				require.False(e.t, got[0].Duplicate, "the id's window has ended")
			},
			sweep: store.DedupExpire,
		},
		{
			name: "Events",
			setup: func(e *env) (string, int64) {
				tp := e.topic("dedup", store.TopicPatch{})
				for _, id := range []string{"a", "b", "c"} {
					e.publish(tp, store.PublishEvent{ID: id, Type: "t"})
				}
				_, err := e.pool.Exec(e.ctx, `UPDATE ferry.event_dedup SET expires_at = now() - interval '1 minute' WHERE topic_id = $1`, tp.ID)
				require.NoError(e.t, err)
				return `SELECT count(*) FROM ferry.event_dedup WHERE topic_id = $1`, tp.ID
			},
			takeOver: func(e *env, tx pgx.Tx) {
				got := e.sqlPublish(tx, "dedup", map[string]any{"id": "a", "type": "t"})
				require.False(e.t, got[0].Duplicate, "the id's window has ended")
			},
			sweep: store.EventDedupExpire,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			count, id := tc.setup(e)
			require.EqualValues(t, 3, e.count(count, id))
			sweeper := e.newNamedPool(2, "sweep") // before tx: on failure tx ends before the pool closes
			tx := e.begin()
			tc.takeOver(e, tx)

			type swept struct {
				n   int64
				err error
			}
			done := inBackground(func(time.Time) swept {
				n, err := tc.sweep(e.ctx, sweeper, 100)
				return swept{n, err}
			})
			var (
				got      swept
				finished bool
			)
			require.Eventually(t, func() bool {
				select {
				case got = <-done:
					finished = true
					return true
				default:
				}
				n, err := e.lockWaiters("sweep")
				return err == nil && n > 0
			}, 10*time.Second, time.Millisecond, "the sweep neither finished nor waited for a lock")
			require.True(t, finished, "the sweep waited for the transaction that took over an id")
			require.NoError(t, got.err)
			require.EqualValues(t, 2, got.n, "the ids nobody holds")
			require.EqualValues(t, 1, e.count(count, id))

			require.NoError(t, tx.Rollback(e.ctx))
			n, err := tc.sweep(e.ctx, e.pool, 100)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the id whose takeover rolled back, at the next sweep")
			require.Zero(t, e.count(count, id))
		})
	}
}
