package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Two instances' lease owner ids.
const (
	ownerA = "00000000-0000-4000-8000-00000000000a"
	ownerB = "00000000-0000-4000-8000-00000000000b"
)

// expireLease makes a lease end in the past, as a killed owner's does.
func (e *env) expireLease(q store.Queue) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `UPDATE ferry.push_leases SET expires_at = now() - interval '1 millisecond' WHERE queue_id = $1`, q.ID)
	require.NoError(e.t, err)
}

// A push lease: acquired when free, refused while another instance's is
// live, taken over once it expired; a heartbeat renews what is still held
// and reports the lost; a release frees it at once.
func TestPushLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.pushQueue("leased")
	other := e.pushQueue("other")
	pull := e.queue("pull", store.QueuePatch{})
	const ttl = 5 * time.Second

	// Free: A gets it. Only push targets are leased.
	res, err := store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID, pull.ID, 1 << 40}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)
	require.Empty(t, res.Held)
	// Again by A: still A's, renewed.
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)

	// Live: B is refused, told how long is left, and nothing is written.
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerB, []int64{q.ID, other.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{other.ID}, res.Acquired)
	require.Contains(t, res.Held, q.ID)
	require.InDelta(t, ttl.Seconds(), res.Held[q.ID].Seconds(), 1)
	require.Equal(t, ownerA, e.leaseOwner(q))

	// Claims for a target: only by its lease's owner.
	e.send(q, store.SendMessage{Body: []byte(`1`)})
	_, _, err = store.PushLeaseClaim(e.ctx, e.pool, ownerB, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.ErrorIs(t, err, store.ErrPushLeaseLost)
	msgs, _, err := store.PushLeaseClaim(e.ctx, e.pool, ownerA, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)

	// Expired: B takes it over; A's heartbeat finds it lost, and A can
	// claim no more.
	e.expireLease(q)
	_, _, err = store.PushLeaseClaim(e.ctx, e.pool, ownerA, store.ClaimParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	require.ErrorIs(t, err, store.ErrPushLeaseLost, "an expired lease claims nothing")
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerB, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)
	require.Equal(t, ownerB, e.leaseOwner(q))
	held, err := store.PushLeaseRenew(e.ctx, e.pool, ownerA, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Empty(t, held, "A's heartbeat: the lease is lost")
	held, err = store.PushLeaseRenew(e.ctx, e.pool, ownerB, []int64{q.ID, other.ID}, ttl)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{q.ID, other.ID}, held)

	// A's release leaves B's lease alone; B's frees it for A at once.
	require.NoError(t, store.PushLeaseRelease(e.ctx, e.pool, ownerA, []int64{q.ID}))
	require.Equal(t, ownerB, e.leaseOwner(q))
	require.NoError(t, store.PushLeaseRelease(e.ctx, e.pool, ownerB, []int64{q.ID}))
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.push_leases WHERE queue_id = $1`, q.ID))
	res, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, ttl)
	require.NoError(t, err)
	require.Equal(t, []int64{q.ID}, res.Acquired)

	// A deleted target's lease goes with it.
	_, err = store.QueueDelete(e.ctx, e.pool, "other")
	require.NoError(t, err)
	require.Zero(t, e.count(`SELECT count(*) FROM ferry.push_leases WHERE queue_id = $1`, other.ID))
}

func (e *env) leaseOwner(q store.Queue) string {
	e.t.Helper()
	var owner string
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT owner::text FROM ferry.push_leases WHERE queue_id = $1`, q.ID).Scan(&owner))
	return owner
}

// The sweep finds the enabled targets with a message claimable now and no
// live lease of another instance, and when to look next: the next message
// to become visible, or the end of another instance's lease over
// claimable messages.
func TestPushSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	due := e.pushQueue("due")
	later := e.pushQueue("later")
	off := e.pushQueue("off")
	pull := e.queue("pull", store.QueuePatch{})
	empty := e.pushQueue("empty")
	heldByB := e.pushQueue("held-by-b")
	mine := e.pushQueue("mine")

	hour, minute := time.Hour, time.Minute
	e.send(due, store.SendMessage{Body: []byte(`1`)})
	e.send(later, store.SendMessage{Body: []byte(`1`), Delay: &minute})
	e.send(later, store.SendMessage{Body: []byte(`2`), Delay: &hour})
	e.send(off, store.SendMessage{Body: []byte(`1`)})
	e.send(pull, store.SendMessage{Body: []byte(`1`)})
	e.send(heldByB, store.SendMessage{Body: []byte(`1`)})
	e.send(mine, store.SendMessage{Body: []byte(`1`)})
	_, err := store.PushOutcome(e.ctx, e.pool, store.PushOutcomeParams{QueueID: off.ID, DisableReason: "gone", DisableAfter: time.Hour})
	require.NoError(t, err)
	for owner, q := range map[string]store.Queue{ownerB: heldByB, ownerA: mine} {
		_, err := store.PushLeaseAcquire(e.ctx, e.pool, owner, []int64{q.ID}, 30*time.Second)
		require.NoError(t, err)
	}

	res, err := store.PushSweep(e.ctx, e.pool, ownerA)
	require.NoError(t, err)
	require.Equal(t, []int64{due.ID, later.ID, empty.ID, heldByB.ID, mine.ID}, res.Targets, "%s", res)
	require.Equal(t, []int64{due.ID, mine.ID}, res.Due, "%s", res)
	require.Len(t, res.Held, 1, "%s", res)
	require.InDelta(t, 30, res.Held[heldByB.ID].Seconds(), 2, "%s", res)
	require.InDelta(t, 30, res.Next.Seconds(), 2, "next: B's lease ends: %s", res)

	// Once B's lease is gone, the next thing due is the delayed message.
	require.NoError(t, store.PushLeaseRelease(e.ctx, e.pool, ownerB, []int64{heldByB.ID}))
	res, err = store.PushSweep(e.ctx, e.pool, ownerA)
	require.NoError(t, err)
	require.Equal(t, []int64{due.ID, heldByB.ID, mine.ID}, res.Due, "%s", res)
	require.Empty(t, res.Held)
	require.InDelta(t, 60, res.Next.Seconds(), 2, "next: the delayed message: %s", res)

	// Its lease expired: due for B as for anyone.
	e.expireLease(mine)
	res, err = store.PushSweep(e.ctx, e.pool, ownerB)
	require.NoError(t, err)
	require.Contains(t, res.Due, mine.ID)
}

// pgStatements counts the statements a pool sends (a pgx tracer).
type pgStatements struct {
	mu   sync.Mutex
	sqls []string
}

func (s *pgStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.sqls = append(s.sqls, d.SQL)
	s.mu.Unlock()
	return ctx
}

func (s *pgStatements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *pgStatements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sqls
	s.sqls = nil
	return out
}

// A push claim is one statement, fenced by the lease inside it: no
// transaction around it (BEGIN, lease check, claim, COMMIT were four round
// trips per claim), whether it claims, finds nothing, or finds the lease
// gone.
func TestPushLeaseClaimOneStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.pushQueue("one-statement")
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	require.NoError(t, err)
	stmts := &pgStatements{}
	cfg.ConnConfig.Tracer = stmts
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, time.Minute)
	require.NoError(t, err)
	e.send(q, store.SendMessage{Body: []byte(`1`)})
	require.NoError(t, pool.Ping(e.ctx))
	stmts.take()

	claim := func(owner string) ([]store.Message, error) {
		msgs, _, err := store.PushLeaseClaim(e.ctx, pool, owner, store.ClaimParams{Queue: q, Max: 5, VisibilityTimeout: time.Minute})
		return msgs, err
	}
	msgs, err := claim(ownerA)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Len(t, stmts.take(), 1, "a claim that claims")
	msgs, err = claim(ownerA)
	require.NoError(t, err)
	require.Empty(t, msgs)
	require.Len(t, stmts.take(), 1, "a claim that finds nothing")
	_, err = claim(ownerB)
	require.ErrorIs(t, err, store.ErrPushLeaseLost)
	require.Len(t, stmts.take(), 1, "a claim without the lease")
}

// Exhausted messages a push claim meets are dead-lettered outside any
// transaction of the claim's, with the dead-letter's own retry: a
// serialization failure there (injected once) neither undoes the claims
// nor keeps the message from its dead letter.
func TestPushLeaseClaimDeadLettersAfterRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	one := 1
	q, _, err := store.QueueUpsert(e.ctx, e.pool, "exhausted", store.QueuePatch{
		MaxReceives: &one, Push: pushPatch("https://a.example/h", "whsec_x"),
	})
	require.NoError(t, err)
	_, err = store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, time.Minute)
	require.NoError(t, err)
	e.send(q, store.SendMessage{Body: []byte(`"exhausted"`)})
	require.Len(t, e.claim(q, 1, time.Minute), 1) // its one receive
	_, err = e.pool.Exec(e.ctx, `UPDATE ferry.messages SET visible_at = now() - interval '1 second' WHERE queue_id = $1`, q.ID)
	require.NoError(t, err)
	e.send(q, store.SendMessage{Body: []byte(`"fresh"`)})
	e.failOnce("INSERT", "ferry.dead_letters")

	msgs, dead, err := store.PushLeaseClaim(e.ctx, e.pool, ownerA, store.ClaimParams{Queue: q, Max: 2, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.JSONEq(t, `"fresh"`, string(msgs[0].Body))
	require.Equal(t, 1, dead)
	require.EqualValues(t, 1, e.deadLetters(q))
	require.EqualValues(t, 1, e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1 AND receive_count = 1 AND visible_at > now()`, q.ID),
		"the fresh message's claim stands")
}

// failOnce makes the first row of the given operation on table fail with a
// serialization failure (40001), as a conflict under load does.
func (e *env) failOnce(op, table string) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		CREATE SEQUENCE fail_once;
		CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('fail_once') = 1 THEN
				RAISE EXCEPTION 'injected' USING ERRCODE = '40001';
			END IF;
			RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
		END $$;
		CREATE TRIGGER fail_once BEFORE `+op+` ON `+table+` FOR EACH ROW EXECUTE FUNCTION fail_once();`)
	require.NoError(e.t, err)
}

// An ack and a nack that meet a serialization failure are
// retried and apply: a retry sends its statements afresh (pgx's batch keeps
// the prepared statement it was sent as, which the retry's connection need
// not have).
func TestReceiptBatchRetries(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"ack", "nack"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			e, q := newQueueEnv(t, "retried", store.QueuePatch{})
			e.send(q, store.SendMessage{Body: []byte(`1`)})
			m := e.claimOne(q, time.Minute)
			switch op {
			case "ack":
				e.failOnce("DELETE", "ferry.messages")
				require.Equal(t, []bool{true}, e.ack(q, m[0].Receipt))
			case "nack":
				e.failOnce("UPDATE", "ferry.messages")
				ok, _ := e.nack(store.NackParams{Queue: q, Receipts: []store.Receipt{m[0].Receipt}})
				require.Equal(t, []bool{true}, ok)
			}
		})
	}
}

// A heartbeat's renewal and another instance's acquire of the same leases
// lock them in the same order (by target id), so they cannot deadlock at
// the expiry edge, whatever plan the renewal gets: here a sequential scan
// of a table whose rows lie in the other order, with the second row
// locked by a third session until both statements wait.
func TestPushLeaseRenewAcquireNoDeadlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q1, q2 := e.pushQueue("first"), e.pushQueue("second")
	for _, q := range []store.Queue{q2, q1} { // q2's row first in the heap
		_, err := e.pool.Exec(e.ctx, `INSERT INTO ferry.push_leases (queue_id, owner, expires_at)
			VALUES ($1, $2, now() - interval '1 second')`, q.ID, ownerA)
		require.NoError(t, err)
	}
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "renew"
	cfg.ConnConfig.RuntimeParams["enable_indexscan"] = "off"
	cfg.ConnConfig.RuntimeParams["enable_bitmapscan"] = "off"
	renewPool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	defer renewPool.Close()
	acquirePool := e.newNamedPool(2, "acquire")

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = tx.Exec(e.ctx, `SELECT 1 FROM ferry.push_leases WHERE queue_id = $1 FOR UPDATE`, q2.ID)
	require.NoError(t, err)

	ids := []int64{q1.ID, q2.ID}
	var wg sync.WaitGroup
	var renewErr, acquireErr error
	wg.Go(func() { _, renewErr = store.PushLeaseRenew(e.ctx, renewPool, ownerA, ids, time.Minute) })
	e.activityWaitingEventually("renew")
	wg.Go(func() { _, acquireErr = store.PushLeaseAcquire(e.ctx, acquirePool, ownerB, ids, time.Minute) })
	e.activityWaitingEventually("acquire")
	require.NoError(t, tx.Commit(e.ctx))
	wg.Wait()
	require.NoError(t, renewErr, "renew")
	require.NoError(t, acquireErr, "acquire")
	owners := e.count(`SELECT count(DISTINCT owner) FROM ferry.push_leases WHERE queue_id = ANY($1)`, ids)
	require.EqualValues(t, 1, owners, "both leases went the same way")
}

// An idle push worker's poll (a claim that finds nothing to claim) writes
// nothing: it reads the lease without locking it (a share lock is a write:
// a transaction id, a WAL record and a dirty page per poll, four times a
// second). A claim with work share-locks it (the fence).
func TestPushLeaseClaimIdleWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.pushQueue("idle")
	_, err := store.PushLeaseAcquire(e.ctx, e.pool, ownerA, []int64{q.ID}, time.Minute)
	require.NoError(t, err)
	locker := func() int64 {
		return e.count(`SELECT xmax::text::bigint FROM ferry.push_leases WHERE queue_id = $1`, q.ID)
	}
	require.Zero(t, locker())
	p := store.ClaimParams{Queue: q, Max: 5, VisibilityTimeout: time.Minute}
	msgs, _, err := store.PushLeaseClaim(e.ctx, e.pool, ownerA, p)
	require.NoError(t, err)
	require.Empty(t, msgs)
	require.Zero(t, locker(), "an idle claim does not lock the lease")
	_, _, err = store.PushLeaseClaim(e.ctx, e.pool, ownerB, p)
	require.ErrorIs(t, err, store.ErrPushLeaseLost, "an idle claim still sees the lease is not its own")

	e.send(q, store.SendMessage{Body: []byte(`1`)})
	msgs, _, err = store.PushLeaseClaim(e.ctx, e.pool, ownerA, p)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.NotZero(t, locker(), "a claim with work share-locks the lease")
}
