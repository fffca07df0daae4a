package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is one test's database and the store objects most tests need.
type env struct {
	t     *testing.T
	ctx   context.Context
	dbURL string
	// db is what the helpers run on: pool, or for newTxEnv the test's
	// transaction.
	db store.TxBeginner
	// pool and sender are nil in a newTxEnv, tx in a newEnv.
	pool   *pgxpool.Pool
	sender *store.Sender
	tx     pgx.Tx
}

// newEnv gives the test a fresh database, a pool big enough for the
// concurrency tests (the default of max(4, NumCPU) would serialise them) and
// a Sender, all closed at cleanup.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, pgtest.NewDatabase(t))
}

// newEnvOn is newEnv on the database at dbURL.
func newEnvOn(t *testing.T, dbURL string) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), dbURL: dbURL}
	e.pool = e.newPool(24)
	e.db = e.pool
	e.sender = e.newSender(store.SenderConfig{})
	return e
}

// newTxEnv is the fast path for a test that needs no commit: its helpers
// run in one transaction on the database the package's tests share
// (pgtest.NewTx), rolled back at cleanup. It has no pool and no Sender
// (send uses MessageSendTx, publish EventPublishTx), so it suits tests
// that see only their own writes, within one transaction: no other
// session, no NOTIFY, no concurrency, and no time passing between
// statements (now() stands still). Names must be the test's own (see
// e.name): an insert waits for another test's uncommitted row with the
// same unique key.
func newTxEnv(t *testing.T) *env {
	t.Helper()
	tx := pgtest.NewTx(t)
	return &env{t: t, ctx: context.Background(), db: tx, tx: tx}
}

// queueSetup is the setup of tests whose subtests each want a database
// and a queue of their own: a newEnv with queue name.
func queueSetup(name string, patch store.QueuePatch) func(t *testing.T) (*env, store.Queue) {
	return func(t *testing.T) (*env, store.Queue) { return newQueueEnv(t, name, patch) }
}

// newQueueEnv is a newEnv and a queue in it.
func newQueueEnv(t *testing.T, name string, patch store.QueuePatch) (*env, store.Queue) {
	t.Helper()
	e := newEnv(t)
	return e, e.queue(name, patch)
}

// patchedQueueSetup is queueSetup with the queue's patch given by each
// subtest.
func patchedQueueSetup(name string) func(t *testing.T, patch store.QueuePatch) (*env, store.Queue) {
	return func(t *testing.T, patch store.QueuePatch) (*env, store.Queue) {
		return queueSetup(name, patch)(t)
	}
}

// txQueueSetup is queueSetup on a newTxEnv, the queue named e.name(base).
func txQueueSetup(base string, patch store.QueuePatch) func(t *testing.T) (*env, store.Queue) {
	return func(t *testing.T) (*env, store.Queue) {
		e := newTxEnv(t)
		return e, e.queue(e.name(base), patch)
	}
}

// name returns base made unique to the test, for the names of things a
// newTxEnv creates on the shared database.
func (e *env) name(base string) string {
	return e.t.Name() + "." + base
}

// newPool opens another pool on the test's database, closed at cleanup.
func (e *env) newPool(maxConns int32) *pgxpool.Pool {
	return e.newNamedPool(maxConns, "")
}

// newNamedPool opens a pool whose sessions carry the given
// application_name, so that pg_stat_activity can tell them apart.
func (e *env) newNamedPool(maxConns int32, appName string) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	require.NoError(e.t, err)
	cfg.MaxConns = maxConns
	if appName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(pool.Close)
	return pool
}

// newSender starts a Sender on the env's pool, closed at cleanup.
func (e *env) newSender(cfg store.SenderConfig) *store.Sender {
	return e.newSenderOn(e.pool, cfg)
}

func (e *env) newSenderOn(pool *pgxpool.Pool, cfg store.SenderConfig) *store.Sender {
	s := store.NewSender(pool, cfg)
	e.t.Cleanup(s.Close)
	return s
}

// queue creates a queue with the given configuration changes.
func (e *env) queue(name string, patch store.QueuePatch) store.Queue {
	e.t.Helper()
	q, created, err := store.QueueUpsert(e.ctx, e.db, name, patch)
	require.NoError(e.t, err)
	require.True(e.t, created)
	return q
}

// send sends msgs with the env's Sender (in a newTxEnv, MessageSendTx)
// and requires success.
func (e *env) send(q store.Queue, msgs ...store.SendMessage) []store.SendResult {
	e.t.Helper()
	if e.tx != nil {
		out, err := store.MessageSendTx(e.ctx, e.tx, q, msgs)
		require.NoError(e.t, err)
		require.Len(e.t, out.Results, len(msgs))
		return out.Results
	}
	res, qid, err := e.sender.Send(e.ctx, q.Name, msgs)
	require.NoError(e.t, err)
	require.Equal(e.t, q.ID, qid)
	require.Len(e.t, res, len(msgs))
	return res
}

// claim claims up to max messages with the given lease.
func (e *env) claim(q store.Queue, max int, lease time.Duration) []store.Message {
	e.t.Helper()
	msgs, _, err := store.MessageClaim(e.ctx, e.db, store.ClaimParams{Queue: q, Max: max, VisibilityTimeout: lease})
	require.NoError(e.t, err)
	return msgs
}

// claimOne claims one message with the given lease and requires that
// there was one.
func (e *env) claimOne(q store.Queue, lease time.Duration) []store.Message {
	e.t.Helper()
	msgs := e.claim(q, 1, lease)
	require.Len(e.t, msgs, 1)
	return msgs
}

// sendClaimed sends m and claims one message with the given lease: m,
// when the queue held nothing else claimable.
func (e *env) sendClaimed(q store.Queue, m store.SendMessage, lease time.Duration) []store.Message {
	e.t.Helper()
	e.send(q, m)
	return e.claimOne(q, lease)
}

// ack acks receipts and returns the ok flags in order.
func (e *env) ack(q store.Queue, receipts ...store.Receipt) []bool {
	e.t.Helper()
	res, _, err := store.MessageAck(e.ctx, e.db, q.ID, receipts)
	require.NoError(e.t, err)
	return oks(res)
}

// nack nacks receipts and returns the ok flags and how many were
// dead-lettered.
func (e *env) nack(p store.NackParams) ([]bool, int) {
	e.t.Helper()
	res, dead, err := store.MessageNack(e.ctx, e.db, p)
	require.NoError(e.t, err)
	return oks(res), dead
}

// extend extends receipts' leases and returns the ok flags.
func (e *env) extend(q store.Queue, timeout time.Duration, receipts ...store.Receipt) []bool {
	e.t.Helper()
	res, err := store.MessageExtend(e.ctx, e.db, q.ID, receipts, timeout)
	require.NoError(e.t, err)
	return oks(res)
}

// count runs a SELECT count(*)-like query and returns its single number.
func (e *env) count(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	require.NoError(e.t, e.db.QueryRow(e.ctx, sql, args...).Scan(&n))
	return n
}

// int64s runs a query of one bigint column and returns its values.
func (e *env) int64s(sql string, args ...any) []int64 {
	e.t.Helper()
	rows, err := e.db.Query(e.ctx, sql, args...)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(e.t, err)
	return out
}

// live counts the queue's live messages.
func (e *env) live(q store.Queue) int64 {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM ferry.messages WHERE queue_id = $1`, q.ID)
}

// deadLetters counts the queue's dead letters.
func (e *env) deadLetters(q store.Queue) int64 {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM ferry.dead_letters WHERE queue_id = $1`, q.ID)
}

// stats returns the queue's stats.
func (e *env) stats(q store.Queue) store.QueueStats {
	e.t.Helper()
	st, err := store.QueueStatsGet(e.ctx, e.db, []int64{q.ID})
	require.NoError(e.t, err)
	s, ok := st[q.ID]
	require.True(e.t, ok)
	return s
}

// requireCountersExact checks the trigger-kept counters against the tables.
func (e *env) requireCountersExact(q store.Queue) {
	e.t.Helper()
	s := e.stats(q)
	require.Equal(e.t, e.live(q), s.Available+s.InFlight+s.Delayed, "live messages by stats vs table")
	require.Equal(e.t, e.deadLetters(q), s.DeadLetters, "dead letters by stats vs table")
}

// waitVisible waits until message id's lease has run out (its visible_at
// has passed), without claiming it.
func (e *env) waitVisible(q store.Queue, id int64) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		var expired bool
		err := e.pool.QueryRow(e.ctx,
			`SELECT visible_at <= now() FROM ferry.messages WHERE queue_id = $1 AND id = $2`, q.ID, id).Scan(&expired)
		return err == nil && expired
	}, 10*time.Second, 10*time.Millisecond)
}

// claimEventually claims until at least one message comes back (e.g. once a
// lease expired) and returns what that claim got.
func (e *env) claimEventually(q store.Queue, max int, lease time.Duration) []store.Message {
	e.t.Helper()
	var (
		got []store.Message
		err error
	)
	require.Eventually(e.t, func() bool {
		got, _, err = store.MessageClaim(e.ctx, e.pool, store.ClaimParams{Queue: q, Max: max, VisibilityTimeout: lease})
		return err != nil || len(got) > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(e.t, err)
	return got
}

// each maps in through f, into a slice of the same length (never nil).
func each[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func oks(res []store.ReceiptResult) []bool {
	return each(res, func(r store.ReceiptResult) bool { return r.OK })
}

func receipts(msgs []store.Message) []store.Receipt {
	return each(msgs, func(m store.Message) store.Receipt { return m.Receipt })
}

func ids(msgs []store.Message) []int64 {
	return each(msgs, func(m store.Message) int64 { return m.ID })
}

func resultIDs(res []store.SendResult) []int64 {
	return each(res, func(r store.SendResult) int64 { return r.ID })
}

// payload is the body most tests send: which producer/group and a sequence
// number.
type payload struct {
	G   string `json:"g,omitempty"`
	P   int    `json:"p,omitempty"`
	Seq int    `json:"seq"`
}

func body(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func decode(t testing.TB, raw json.RawMessage) payload {
	t.Helper()
	var p payload
	require.NoError(t, json.Unmarshal(raw, &p), "body %s", raw)
	return p
}

// msg is a message with body {"seq": seq}.
func msg(seq int) store.SendMessage {
	return store.SendMessage{Body: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq))}
}

// grouped is a message of group g with body {"g": g, "seq": seq}.
func grouped(g string, seq int) store.SendMessage {
	return store.SendMessage{Group: g, Body: json.RawMessage(fmt.Sprintf(`{"g":%q,"seq":%d}`, g, seq))}
}

func ptr[T any](v T) *T { return &v }

// pause waits d. It paces polling loops; it never stands in for
// synchronisation.
func pause(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// counts returns the queue's stats without the age, which depends on the
// clock.
func (e *env) counts(q store.Queue) store.QueueStats {
	e.t.Helper()
	s := e.stats(q)
	s.OldestAgeSeconds = 0
	return s
}

// holdKey is the advisory lock key the hold trigger waits on.
const holdKey = 0x686f6c64 // "hold"

// holdSends makes every statement that inserts into ferry.messages (sends,
// redrives) stop at its end, inside its transaction, until release is
// called: an AFTER INSERT statement trigger, installed on the test's own
// database, waits for an advisory lock the test holds. It fires also when
// the INSERT writes no row (e.g. only duplicates). Tests use it to make an
// interleaving happen every time instead of by chance.
func (e *env) holdSends() (release func()) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		CREATE OR REPLACE FUNCTION public.test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(`+fmt.Sprint(holdKey)+`); RETURN NULL; END $$;
		CREATE OR REPLACE TRIGGER test_hold AFTER INSERT ON ferry.messages
			FOR EACH STATEMENT EXECUTE FUNCTION public.test_hold();`)
	require.NoError(e.t, err)
	holder, err := e.pool.Acquire(e.ctx)
	require.NoError(e.t, err)
	_, err = holder.Exec(e.ctx, `SELECT pg_advisory_lock($1)`, holdKey)
	require.NoError(e.t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, err := holder.Exec(e.ctx, `SELECT pg_advisory_unlock($1)`, holdKey)
			holder.Release()
			require.NoError(e.t, err)
		})
	}
	e.t.Cleanup(release)
	return release
}

// atOnce runs f(0) .. f(n-1), each in a goroutine of its own, all let go
// at the same moment, and returns when every one has.
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// doneOrWaiting waits until the operation whose outcome comes on done has
// finished, or waiters (sessions waiting for a lock) is positive, failing
// with msg after 10 seconds. The returned function gives the outcome:
// the one already received, or the one still to come (after the caller
// let go of the lock); finished says which.
func doneOrWaiting[T any](t *testing.T, done <-chan T, waiters func() (int, error), msg string) (outcome func() T, finished bool) {
	t.Helper()
	var got T
	require.Eventually(t, func() bool {
		select {
		case got = <-done:
			finished = true
			return true
		default:
		}
		n, err := waiters()
		return err == nil && n > 0
	}, 10*time.Second, time.Millisecond, msg)
	return func() T {
		if !finished {
			got = <-done
		}
		return got
	}, finished
}

// inBackground runs f in a goroutine, given the time it was started, and
// returns where its result will arrive.
func inBackground[T any](f func(start time.Time) T) <-chan T {
	out := make(chan T, 1)
	start := time.Now()
	go func() { out <- f(start) }()
	return out
}

// heldGroups is the part of groupTracker and keyTracker that knows which
// message of each group (an ordered subscription's key) is in flight.
// Its mutex also guards the trackers' own records.
type heldGroups struct {
	mu   sync.Mutex
	held map[string]int64 // group → id of the message in flight
}

func newHeldGroups() heldGroups { return heldGroups{held: map[string]int64{}} }

// releasing records that msgs are about to be acked or dead-lettered. It
// must be called before the ack: the group's next message may legitimately
// be claimed as soon as the ack commits.
func (h *heldGroups) releasing(msgs []store.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range msgs {
		if m.Group != nil && h.held[*m.Group] == m.ID {
			delete(h.held, *m.Group)
		}
	}
}

// heldSend is the outcome of a send started by startHeldSend.
type heldSend struct {
	res []store.SendResult
	err error
}

// startHeldSend sends m to q on a Sender of its own (one worker, sessions
// named "held-sender") and returns once the send waits in the hold
// trigger (holdSends must be in force); its outcome comes on the channel
// after the release.
func (e *env) startHeldSend(q store.Queue, m store.SendMessage) <-chan heldSend {
	e.t.Helper()
	sender := e.newSenderOn(e.newNamedPool(2, "held-sender"), store.SenderConfig{Workers: 1})
	done := make(chan heldSend, 1)
	go func() {
		res, _, err := sender.Send(context.Background(), q.Name, []store.SendMessage{m})
		done <- heldSend{res, err}
	}()
	e.activityWaitingEventually("held-sender")
	return done
}

// lockWaiters counts the sessions named appName that wait for a lock.
func (e *env) lockWaiters(appName string) (int, error) {
	var n int
	err := e.pool.QueryRow(e.ctx, `
		SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock'`, appName).Scan(&n)
	return n, err
}

func (e *env) activityWaitingEventually(appName string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		n, err := e.lockWaiters(appName)
		return err == nil && n > 0
	}, 10*time.Second, time.Millisecond, "%s never waited for a lock", appName)
}

// listenNotifications LISTENs on Ferry's notification channel on a
// connection of its own (closed at cleanup) and returns a function that
// gives the next notification's payload, or false when none comes within
// 300 ms.
func (e *env) listenNotifications() (heard func() (string, bool)) {
	e.t.Helper()
	listener, err := pgx.Connect(e.ctx, e.dbURL)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { listener.Close(context.Background()) })
	// Not spelt as Ferry's own LISTEN: a Notifier takes a session that
	// runs that statement without registering for an older release's
	// instance (and has every SQL API wake NOTIFY).
	_, err = listener.Exec(e.ctx, `listen ferry_messages`)
	require.NoError(e.t, err)
	return func() (string, bool) {
		ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
		defer cancel()
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			return "", false
		}
		return n.Payload, true
	}
}
