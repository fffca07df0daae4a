package handlers_test

// The SQL API's consumers inside applications' transactions: receipts
// shared with REST, wakes at commit, nothing held that REST needs, and
// exactly-once effects for a consumer that acks in its work's transaction.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// sqlPool is a pool on the server's database, for the SQL API.
func sqlPool(t testing.TB, env *ferrytest.Env) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(context.Background(), env.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// TestSQLConsumeReceiptsInterchangeable: a receipt from ferry.receive is
// acked, nacked and extended over REST, and one from REST through
// ferry.ack, ferry.nack and ferry.extend, for a queue and a subscription.
func TestSQLConsumeReceiptsInterchangeable(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db := sqlPool(t, env)
	putTopic(t, env, "t", nil, http.StatusCreated)
	putSub(t, env, "t", "s", nil, http.StatusCreated)
	for _, target := range []string{"q", "t/s"} {
		t.Run(target, func(t *testing.T) {
			env := forTest(env, t)
			rest, sql := restFace{t, env}, sqlFace{t, db}
			feed := func(n int) {
				if target == "q" {
					for i := range n {
						send(t, env, "q", msg(map[string]any{"i": i}))
					}
					return
				}
				for i := range n {
					publishEvents(t, env, "t", evt("e", "data", map[string]any{"i": i}))
				}
			}
			if target == "q" {
				putQueue(t, env, "q", nil)
			}
			check := func(from, to consumerFace) {
				feed(3)
				got, e := from.receive(target, ip(3), ip(60))
				require.Nil(t, e)
				require.Len(t, got, 3)
				r := pluck(got, func(m consumed) string { return m.Receipt })
				st, e := to.settle("ack", target, r[:1], nil)
				require.Nil(t, e)
				require.Equal(t, []string{"ok"}, st, "ack")
				st, e = to.settle("extend", target, r[1:], map[string]any{"visibility_timeout_seconds": 120})
				require.Nil(t, e)
				require.Equal(t, []string{"ok", "ok"}, st, "extend")
				st, e = to.settle("nack", target, r[1:2], map[string]any{"delay_seconds": 0})
				require.Nil(t, e)
				require.Equal(t, []string{"ok"}, st, "nack")
				st, e = to.settle("nack", target, r, map[string]any{"dead_letter": true})
				require.Nil(t, e)
				require.Equal(t, []string{"stale", "stale", "ok"}, st, "nack to the dead letters")
				// The nacked message comes again, to the other face.
				again, e := to.receive(target, ip(10), nil)
				require.Nil(t, e)
				require.Len(t, again, 1)
				require.Equal(t, got[1].ID, again[0].ID)
				require.Equal(t, 2, again[0].ReceiveCount)
				st, e = from.settle("ack", target, []string{again[0].Receipt}, nil)
				require.Nil(t, e)
				require.Equal(t, []string{"ok"}, st)
			}
			check(sql, rest)
			check(rest, sql)
			var s client.QueueStats
			if target == "q" {
				s = counts(t, env, "q")
			} else {
				s = subCounts(t, env, "t", "s")
			}
			require.Equal(t, client.QueueStats{DeadLetters: 2}, s)
		})
	}
}

// TestSQLConsumeWakes: what a SQL ack or nack makes claimable wakes a
// REST long poll when the caller commits, and not before. The server
// polls on its own only every 30 s, so only the NOTIFY explains a prompt
// answer.
func TestSQLConsumeWakes(t *testing.T) {
	t.Parallel()
	_, envs := pollingServers(t, "ferry-sqlwake")
	env := envs[0]
	db := sqlPool(t, env)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		msgs   []map[string]any
		settle string
	}{
		// The ack of a group's head promotes the next message.
		{"ack_promotes", []map[string]any{msg("a1", "group", "g"), msg("a2", "group", "g")},
			`SELECT count(*) FROM ferry.ack($1, ARRAY[$2])`},
		// A nack without delay makes the message claimable again.
		{"nack_no_delay", []map[string]any{msg("n1")}, `SELECT count(*) FROM ferry.nack($1, ARRAY[$2], '{"delay_seconds": 0}')`},
		// A nack to the dead letters promotes the group's next message.
		{"nack_dead_letter", []map[string]any{msg("d1", "group", "g"), msg("d2", "group", "g")},
			`SELECT count(*) FROM ferry.nack($1, ARRAY[$2], '{"dead_letter": true}')`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := forTest(env, t)
			q := "wake-" + c.name
			putQueue(t, env, q, nil)
			sent := ids(send(t, env, q, c.msgs...))
			var receipt string
			require.NoError(t, db.QueryRow(ctx, `SELECT receipt FROM ferry.receive($1)`, q).Scan(&receipt))
			done := parked(t, c.name, env, func() asyncResult {
				return doAsync(env, "POST", qpath(q, "/receive"), map[string]any{"wait_seconds": 20})
			})
			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, c.settle, q, receipt)
			require.NoError(t, err)
			select {
			case res := <-done:
				t.Fatalf("the long poll returned before the commit: %d %s", res.status, res.body)
			case <-time.After(300 * time.Millisecond):
				// Nothing is claimable before the commit, so nothing
				// answers the poll (a bound, not a synchronisation).
			}
			committed := time.Now()
			require.NoError(t, tx.Commit(ctx))
			res := <-done
			got, err := decodeReceived(res)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, sent[len(sent)-1], got[0].ID)
			require.Less(t, time.Since(committed), 2*time.Second, "woken by the commit's NOTIFY")
		})
	}
}

// TestSQLConsumeOpenTransactionStallsNothing: an application transaction
// that received and acked through the SQL API and stays open holds
// nothing REST's sends, receives and acks on the queue need: no depth
// counter row of the shared slots stays locked, and each REST call
// answers in well under 100 ms.
func TestSQLConsumeOpenTransactionStallsNothing(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	ctx := context.Background()
	putQueue(t, env, "stall", nil)
	send(t, env, "stall", msg(1), msg(2), msg(3))
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `SELECT receipt FROM ferry.receive('stall', 2, 60)`)
	require.NoError(t, err)
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, held, 2)
	var status string
	require.NoError(t, tx.QueryRow(ctx, `SELECT status FROM ferry.ack('stall', ARRAY[$1])`, held[0]).Scan(&status))
	require.Equal(t, "ok", status)
	require.NoError(t, tx.QueryRow(ctx, `SELECT status FROM ferry.nack('stall', ARRAY[$1], '{"dead_letter": true}')`, held[1]).Scan(&status))
	require.Equal(t, "ok", status)

	// Every shared counter slot of the queue can be written at once, as
	// a REST writer on any backend would (an upsert, which waits for a
	// row the open transaction locked or inserted).
	db := sqlPool(t, env)
	other, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`)
	require.NoError(t, err)
	_, err = other.Exec(ctx, `
		INSERT INTO ferry.queue_counts AS c (queue_id, slot, messages)
		SELECT q.id, s, 0 FROM ferry.queues q, generate_series(0, 63) AS s WHERE q.name = 'stall' AND q.topic_id IS NULL
		ON CONFLICT (queue_id, slot) DO UPDATE SET messages = c.messages + excluded.messages`)
	require.NoError(t, err, "the open transaction holds none of the queue's shared counter rows")
	require.NoError(t, other.Rollback(ctx))

	var took []time.Duration
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		// The transaction stays open to the end of the loop: a call that
		// waited for it would take until then.
		d := time.Since(start)
		require.Less(t, d, time.Second, "%s while the transaction is open", what)
		took = append(took, d)
	}
	for i := range 20 {
		timed("send", func() { send(t, env, "stall", msg(i)) })
		var got []client.Message
		timed("receive", func() { got = receive(t, env, "stall", map[string]any{"max_messages": 10}) })
		require.NotEmpty(t, got)
		timed("ack", func() { require.Equal(t, repeat("ok", len(got)), ack(t, env, "stall", receipts(got)...)) })
	}
	requireTypicallyFast(t, "REST calls while the consumer's transaction is open", took)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, client.QueueStats{DeadLetters: 1}, counts(t, env, "stall"))
}

// TestSQLConsumeExactlyOnce: a consumer that records its effect under a
// unique key and acks in the same transaction, killed at every step
// (its connection terminated after the receive, after the insert, after
// the ack; and once after the commit), has every message's effect exactly
// once: nothing is lost, no redelivery ever finds an effect committed
// (no unique violation), and the queue ends empty with no dead letters.
// Once with the receive inside the transaction (a kill rolls the claim
// back), once with the receive committed on its own (a kill leaves the
// lease, which must expire before the redelivery).
func TestSQLConsumeExactlyOnce(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	ctx := context.Background()
	admin := sqlPool(t, env)
	_, err := admin.Exec(ctx, `CREATE TABLE public.charges (order_id text PRIMARY KEY, queue text NOT NULL)`)
	require.NoError(t, err)
	for _, apart := range []bool{false, true} {
		q := fmt.Sprintf("orders-apart-%v", apart)
		t.Run(q, func(t *testing.T) {
			env := forTest(env, t)
			putQueue(t, env, q, map[string]any{"visibility_timeout_seconds": 1, "max_receives": 100})
			const n = 3
			for i := range n {
				send(t, env, q, msg(map[string]any{"order": fmt.Sprintf("%s-%d", q, i)}))
			}
			c := &killedConsumer{t: t, admin: admin, url: env.DatabaseURL, queue: q, apart: apart, attempts: map[string]int{}}
			ferrytest.WaitFor(t, 60*time.Second, "every order charged", func() bool {
				c.step()
				var charged int
				require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM public.charges WHERE queue = $1`, q).Scan(&charged))
				return charged == n && counts(t, env, q) == client.QueueStats{}
			})
			require.Zero(t, c.conflicts, "no redelivery found its effect committed")
			for order, tries := range c.attempts {
				require.Equal(t, len(killPoints)+1, tries, "order %s: killed at every step, then done", order)
			}
			require.Len(t, c.attempts, n)
		})
	}
}

// killPoints are where the consumer's connection is terminated, one per
// attempt of each message; the attempt after them commits (and every
// other message is killed right after its commit).
var killPoints = []string{"after_receive", "after_insert", "after_ack"}

// killedConsumer is the consumer of TestSQLConsumeExactlyOnce.
type killedConsumer struct {
	t         *testing.T
	admin     *pgxpool.Pool
	url       string
	queue     string
	apart     bool
	attempts  map[string]int // per order: attempts so far
	conflicts int
}

// step is one attempt: connect, receive at most one message, and work it
// until the attempt's kill point (or to the commit).
func (c *killedConsumer) step() {
	t, ctx := c.t, context.Background()
	conn, err := pgx.Connect(ctx, c.url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var pid uint32 = conn.PgConn().PID()
	var tx pgx.Tx
	if !c.apart {
		tx, err = conn.Begin(ctx)
		require.NoError(t, err)
	}
	var db interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	} = conn
	if tx != nil {
		db = tx
	}
	var (
		body    []byte
		receipt string
	)
	err = db.QueryRow(ctx, `SELECT body, receipt FROM ferry.receive($1)`, c.queue).Scan(&body, &receipt)
	if errors.Is(err, pgx.ErrNoRows) {
		return // nothing visible now (a lease has not expired yet)
	}
	require.NoError(t, err)
	var m struct {
		Order string `json:"order"`
	}
	require.NoError(t, json.Unmarshal(body, &m))
	attempt := c.attempts[m.Order]
	c.attempts[m.Order]++
	kill := func(at string) bool {
		if attempt < len(killPoints) && killPoints[attempt] == at {
			c.terminate(pid)
			return true
		}
		return false
	}
	if kill("after_receive") {
		return
	}
	if tx == nil {
		tx, err = conn.Begin(ctx)
		require.NoError(t, err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO public.charges (order_id, queue) VALUES ($1, $2)`, m.Order, c.queue)
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" {
		c.conflicts++
		return
	}
	require.NoError(t, err)
	if kill("after_insert") {
		return
	}
	var status string
	require.NoError(t, tx.QueryRow(ctx, `SELECT status FROM ferry.ack($1, ARRAY[$2])`, c.queue, receipt).Scan(&status))
	if status != "ok" {
		// The lease ran out: someone else may have the message now.
		require.NoError(t, tx.Rollback(ctx))
		return
	}
	if kill("after_ack") {
		return
	}
	require.NoError(t, tx.Commit(ctx))
	if len(c.attempts)%2 == 0 {
		c.terminate(pid) // after the commit: nothing may come back
	}
}

// terminate kills the backend pid and waits until it is gone.
func (c *killedConsumer) terminate(pid uint32) {
	ctx := context.Background()
	var ok bool
	require.NoError(c.t, c.admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int(pid)).Scan(&ok))
	require.True(c.t, ok)
	ferrytest.WaitFor(c.t, 10*time.Second, "the killed backend to end", func() bool {
		var alive bool
		require.NoError(c.t, c.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, int(pid)).Scan(&alive))
		return !alive
	})
}

// TestSQLConsumePushTarget: a push queue can be received from, over REST
// and through ferry.receive alike (the pull consumer competes with push
// delivery), and a receive never waits: an empty answer comes at once.
func TestSQLConsumePushTarget(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush)
	// The receiver holds every delivery until the test ends: push keeps
	// one message in flight, the others are there to pull.
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, h hookRequest) {
		<-h.done
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	putQueue(t, env, "pushed", map[string]any{"push": map[string]any{"url": rc.url(), "max_in_flight": 1, "timeout_seconds": 30}})
	send(t, env, "pushed", msg(1), msg(2), msg(3), msg(4), msg(5))
	ferrytest.WaitFor(t, waitFor, "push to take one message", func() bool { return len(rc.requests()) == 1 })
	rest, sql := restFace{t, env}, sqlFace{t, sqlPool(t, env)}
	for _, f := range []consumerFace{rest, sql} {
		got, e := f.receive("pushed", ip(2), nil)
		require.Nil(t, e)
		require.Len(t, got, 2)
	}
	putQueue(t, env, "empty", nil)
	start := time.Now()
	got, e := sql.receive("empty", ip(10), nil)
	require.Nil(t, e)
	require.Empty(t, got)
	// A wait of even one fallback poll (1 s) would show; a loaded CI
	// machine once took 280 ms for the call itself.
	require.Less(t, time.Since(start), 900*time.Millisecond, "ferry.receive does not wait")
}
