package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/migrations"
	"github.com/ferry-mq/ferry/store"
)

// DESIGN.md invariant 13 (and 1): across a failover to a synchronous
// standby nothing acknowledged is lost, and Ferry finds the new primary by
// itself. Two Ferry instances use one multi-host URL (primary, standby;
// target_session_attrs=read-write). Instance a is under load: sends with
// dedup ids and publishes, each retried with the same ids until it gets a
// 2xx (as a real client does with a 503), and receives and acks on a queue
// and a subscription. Instance b holds long polls. The primary is killed
// with SIGKILL and the standby promoted. Then: /readyz answered 503 during
// the outage, promptly, and 200 after; no request got anything but a 2xx
// or a 503 problem with Retry-After; every acknowledged send and publish
// is on the new primary exactly once; an acked message is never delivered
// again; a long poll waiting through the failover returned, and after it
// b's long polls are woken by a's sends (its LISTEN connection is back:
// b's fallback poll is 30 s); River's notifiers and leader are back on
// the new primary.
func TestFailoverToSynchronousStandby(t *testing.T) {
	t.Parallel()
	primary, standby, url := syncPair(t)
	a := ferrytest.StartOn(t, url+"&application_name=ferry-a")
	b := ferrytest.StartOn(t, url+"&application_name=ferry-b", func(c *server.Config) { c.FallbackPoll = 30 * time.Second })
	ca, cb := newFailoverClient(t, a), newFailoverClient(t, b)
	for _, put := range []struct{ path, body string }{
		{"/v1/queues/work", `{"visibility_timeout_seconds": 2, "max_receives": 1000}`},
		{"/v1/queues/wake", `{}`},
		{"/v1/queues/doomed", `{}`},
		{"/v1/topics/log", `{"partitions": 2}`},
		{"/v1/topics/log/subscriptions/all", `{"visibility_timeout_seconds": 2, "max_receives": 1000}`},
	} {
		r := ca.must(t, "PUT", put.path, put.body)
		require.Equal(t, http.StatusCreated, r.status, "%s: %s", put.path, r.body)
	}

	l := newLedger()
	stopLoad := l.start(ca)
	await(t, 30*time.Second, func() bool { return l.successes() >= 20 }, "the load runs")

	// A long poll on b waits through the failover.
	parked := b.Server.LongPollsParked()
	during := make(chan failoverResponse, 1)
	go func() { during <- cb.do("POST", "/v1/queues/wake/receive", `{"wait_seconds": 20}`) }()
	parkedOn(t, b, parked)

	var o outageTimes
	require.NoError(t, primary.Kill())
	o.killed = time.Now() // every process of the primary is gone
	outageSeen(t, ca, cb, l, o.killed)
	// The primary stays down about as long as a failover manager takes to
	// declare it dead and promote the standby: long enough for every
	// reconnecting loop to back off.
	time.Sleep(time.Until(o.killed.Add(outage)))
	o.promoting = time.Now()
	require.NoError(t, standby.Promote(context.Background()))
	o.promoted = time.Now()
	leaderAt := riverLeaderExpiry(t, standby.URL("ferry"))

	o.recovery = awaitRecovery(t, ca, cb, standby.URL("ferry"), leaderAt)
	for _, app := range []string{"ferry-a", "ferry-b"} {
		// From when the new primary took writes (Promote returned): pg_ctl
		// promote's own time (1.5 s seen on a loaded machine) is not Ferry's.
		require.Less(t, o.listening[app].Sub(o.promoted), 2*time.Second,
			"%s's notifier LISTENs again on the new primary soon after the promotion", app)
	}
	await(t, 60*time.Second, func() bool { return l.successesSince(o.promoted) >= 20 }, "the load goes on")
	stopLoad()

	r := <-during
	require.NoError(t, r.err)
	require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, r.status, "%s", r.body)
	require.Less(t, r.took, 25*time.Second, "the long poll waiting through the failover returned")
	t.Logf("the long poll waiting through the failover answered %d after %s", r.status, r.took.Round(time.Millisecond))
	wakeAfterFailover(t, ca, cb, b)

	o.firstSend = l.firstSendAfter(o.killed)
	require.True(t, o.firstSend.After(o.promoting), "nothing is acknowledged between the kill and the promotion")
	require.Zero(t, l.unavailableSince(later(o.ready["a"], o.ready["b"])),
		"once /readyz is 200 no request meets a dead pooled connection")
	o.log(t, l)
	l.requireClean(t)
	l.requireOnNewPrimary(t, standby.URL("ferry"))
	l.drain(t, ca, "/v1/queues/work", l.queue, l.sentIDs())
	l.drain(t, ca, "/v1/topics/log/subscriptions/all", l.sub, l.publishedIDs())
	l.requireClean(t)
}

// outageTimes are the moments of a failover.
type outageTimes struct {
	killed, promoting, promoted, firstSend time.Time
	recovery
}

// log reports the outage as the lead quotes it.
func (o outageTimes) log(t *testing.T, l *ledger) {
	t.Helper()
	since := func(at time.Time) time.Duration { return at.Sub(o.promoting).Round(time.Millisecond) }
	t.Logf("failover: primary held down %s, then Promote took %s; from the start of the promotion: "+
		"first 2xx send %s (kill → %s), /readyz 200 on a %s, on b %s, LISTEN again on a %s, on b %s "+
		"(River's on a %s, on b %s), River's leadership renewed %s; "+
		"%d requests answered 503 during the outage, %d begun after Promote returned",
		o.promoting.Sub(o.killed).Round(time.Millisecond), since(o.promoted), since(o.firstSend),
		o.firstSend.Sub(o.killed).Round(time.Millisecond), since(o.ready["a"]), since(o.ready["b"]),
		since(o.listening["ferry-a"]), since(o.listening["ferry-b"]),
		since(o.listening["river ferry-a"]), since(o.listening["river ferry-b"]), since(o.riverLeader),
		l.unavailable.Load(), l.unavailableSince(o.promoted))
}

// await polls cond every 10 ms in the test's goroutine (so cond may use
// require) until it holds, and fails the test if it does not within the
// bound.
func await(t *testing.T, within time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			require.Fail(t, "condition not met within "+within.String(), msgAndArgs...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncPair starts a durable primary with a synchronous standby and a
// database "ferry" on it, and returns both and Ferry's multi-host URL.
func syncPair(t *testing.T) (primary, standby *pgcluster.Cluster, url string) {
	t.Helper()
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{
		DataDir: filepath.Join(t.TempDir(), "primary"), Durable: true, Logf: t.Logf,
		Settings: map[string]string{"wal_level": "replica", "max_wal_senders": "4"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })
	standby, err = primary.StartStandby(ctx, pgcluster.StandbyOptions{
		DataDir: filepath.Join(t.TempDir(), "standby"), Name: "ferry_standby", Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []*pgcluster.Cluster{primary, standby} {
				b, _ := os.ReadFile(filepath.Join(c.DataDir(), "postgresql.log"))
				t.Logf("%s/postgresql.log:\n%s", c.DataDir(), b)
			}
		}
	})
	execAdmin(t, primary, "CREATE DATABASE ferry")
	url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/ferry?sslmode=disable"+
		"&target_session_attrs=read-write&connect_timeout=5", primary.Port(), standby.Port())
	return primary, standby, url
}

// outageSeen waits until both instances' /readyz answer 503, each within
// 3 s, and the load has met a 503: the outage is visible. Then the test
// promotes (as an operator or a failover manager would, on seeing it).
func outageSeen(t *testing.T, ca, cb *failoverClient, l *ledger, killed time.Time) {
	t.Helper()
	for _, c := range []*failoverClient{ca, cb} {
		await(t, 30*time.Second, func() bool {
			r := c.do("GET", "/readyz", nil)
			require.NoError(t, r.err)
			require.Less(t, r.took, 3*time.Second, "/readyz answers promptly during the outage")
			return r.status == http.StatusServiceUnavailable
		}, "/readyz goes 503 when the primary is gone")
	}
	await(t, 30*time.Second, func() bool { return l.unavailable.Load() > 0 }, "the load meets 503s")
	// Beyond the load's calls: a PUT, a GET, and a DELETE (whose
	// transaction the handler begins itself).
	for _, r := range []failoverResponse{
		ca.do("PUT", "/v1/queues/created-during-the-outage", `{}`),
		ca.do("GET", "/v1/queues/work", nil),
		ca.do("DELETE", "/v1/queues/doomed", nil),
	} {
		require.NoError(t, r.err)
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
		require.NotEmpty(t, r.header.Get("Retry-After"))
	}
	t.Logf("outage seen %s after the kill", time.Since(killed).Round(time.Millisecond))
}

// outage is how long the test keeps the primary down before promoting.
const outage = 7 * time.Second

// recovery is when each instance's /readyz first answered 200, when
// each instance's notifier, and River's, was first seen LISTENing on the
// new primary, and when River's leader was seen renewing its leadership
// there.
type recovery struct {
	ready       map[string]time.Time // by instance: "a", "b"
	listening   map[string]time.Time // by application_name; River's as "river ferry-a"
	riverLeader time.Time
}

// awaitRecovery polls both instances' /readyz (each answer within 3 s)
// and the new primary's sessions and river_leader until both instances
// are ready, all four notifiers LISTEN again and River's leadership
// expires later than leaderAt (it was renewed), and says when each
// happened.
func awaitRecovery(t *testing.T, ca, cb *failoverClient, dbURL string, leaderAt time.Time) recovery {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rec := recovery{ready: map[string]time.Time{}, listening: map[string]time.Time{}}
	await(t, 60*time.Second, func() bool {
		for name, c := range map[string]*failoverClient{"a": ca, "b": cb} {
			if _, done := rec.ready[name]; done {
				continue
			}
			r := c.do("GET", "/readyz", nil)
			require.NoError(t, r.err)
			require.Less(t, r.took, 3*time.Second, "/readyz answers promptly")
			if r.status == http.StatusOK {
				rec.ready[name] = time.Now()
			}
		}
		// The notifier's LISTEN, and River's notifier's (LISTEN "river_...").
		rows, err := conn.Query(ctx, `SELECT DISTINCT
				CASE WHEN query = 'LISTEN ferry_messages' THEN '' ELSE 'river ' END || application_name
			FROM pg_stat_activity
			WHERE (query = 'LISTEN ferry_messages' OR query LIKE 'LISTEN "%river%')
				AND application_name IN ('ferry-a', 'ferry-b')`)
		require.NoError(t, err)
		apps, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, app := range apps {
			if _, done := rec.listening[app]; !done {
				rec.listening[app] = time.Now()
			}
		}
		if rec.riverLeader.IsZero() && riverLeaderExpiry(t, dbURL).After(leaderAt) {
			rec.riverLeader = time.Now()
		}
		return len(rec.ready) == 2 && len(rec.listening) == 4 && !rec.riverLeader.IsZero()
	}, "both instances are ready, LISTEN again and have a River leader after the promotion")
	return rec
}

// wakeAfterFailover: a long poll on b is woken by a send on a, through
// NOTIFY and b's listener connection (b's fallback poll is 30 s).
func wakeAfterFailover(t *testing.T, ca, cb *failoverClient, b *ferrytest.Env) {
	t.Helper()
	before := b.Server.LongPollsParked()
	got := make(chan failoverResponse, 1)
	go func() { got <- cb.do("POST", "/v1/queues/wake/receive", `{"wait_seconds": 20}`) }()
	parkedOn(t, b, before)
	sent := time.Now()
	r := ca.must(t, "POST", "/v1/queues/wake/messages", `{"messages": [{"body": "after"}]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = <-got
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"after"`, "b's long poll got a's message")
	took := time.Since(sent)
	require.Less(t, took, 5*time.Second, "b's long poll was woken by NOTIFY, not by its 30 s fallback poll")
	t.Logf("after the failover, a send on a woke a long poll on b in %s", took.Round(time.Millisecond))
}

// parkedOn waits until env's server has more long polls parked than
// before (Server.LongPollsParked): one found nothing and waits, having
// taken its wake-up before it looked, so what happens next must wake it.
// (A poll's statement in pg_stat_activity is no such proof: the pool lends
// the connection to other statements at once.)
func parkedOn(t *testing.T, env *ferrytest.Env, before int64) {
	t.Helper()
	await(t, 20*time.Second, func() bool { return env.Server.LongPollsParked() > before }, "a long poll parks")
}

// riverLeaderExpiry is when River's current leadership expires (the
// leader extends it while it holds leadership).
func riverLeaderExpiry(t *testing.T, dbURL string) time.Time {
	t.Helper()
	return queryOne[time.Time](t, dbURL, `SELECT coalesce(max(expires_at), 'epoch') FROM river_leader`)
}

func queryOne[T any](t *testing.T, dbURL, sql string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v T
	require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&v))
	return v
}

// failoverClient calls one Ferry instance from any goroutine: it reports
// transport errors instead of failing the test, and checks every response
// against the spec (through the instance's client).
type failoverClient struct {
	base string
	http *http.Client
}

func newFailoverClient(t *testing.T, env *ferrytest.Env) *failoverClient {
	t.Helper()
	return &failoverClient{base: env.URL, http: env.Client}
}

type failoverResponse struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
	err    error
}

func (c *failoverClient) do(method, path string, body any) failoverResponse {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return failoverResponse{err: err}
		}
		r = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return failoverResponse{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+ferrytest.AdminKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	begin := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return failoverResponse{err: err, took: time.Since(begin)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return failoverResponse{status: resp.StatusCode, header: resp.Header, body: raw, took: time.Since(begin), err: err}
}

func (c *failoverClient) must(t *testing.T, method, path string, body any) failoverResponse {
	t.Helper()
	r := c.do(method, path, body)
	require.NoError(t, r.err)
	return r
}

// ledger is what the load saw: every acknowledged send and publish, every
// ok ack, and anything a client must never see.
type ledger struct {
	mu        sync.Mutex
	sent      map[string]string // dedup id → message id, from 2xx answers
	published map[string]bool   // event ids answered 2xx
	queue     *acks             // of queue work, by message id
	sub       *acks             // of subscription all, by event id
	received  []receivedAt      // every delivery, to check against the acks
	okAt      []time.Time       // when each send or publish got its 2xx
	sendOKAt  [][2]time.Time    // start and end of each 2xx send
	bad       []string          // answers that are not 2xx nor a proper 503

	unavailable   atomic.Int64 // 503s met
	unavailableAt []time.Time  // when the request of each began
	duplicates    int          // messages answered "duplicate": a retry of a send that had committed
}

// acks are a consumer's acks: those answered ok and those whose answer
// never came (a 503: the ack may or may not have committed, so the
// message may be gone or may come back).
type acks struct {
	ok      map[string]int // id → receive_count of the delivery acked ok
	unknown map[string]bool
}

type receivedAt struct {
	acked        *acks
	id           string
	receiveCount int
}

func newLedger() *ledger {
	return &ledger{
		sent: map[string]string{}, published: map[string]bool{},
		queue: &acks{ok: map[string]int{}, unknown: map[string]bool{}},
		sub:   &acks{ok: map[string]int{}, unknown: map[string]bool{}},
	}
}

// ok reports whether r is a 2xx; a 503 problem with Retry-After is counted
// and is not; anything else is recorded as bad.
func (l *ledger) ok(what string, r failoverResponse) bool {
	if r.err == nil && r.status/100 == 2 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.err == nil && r.status == http.StatusServiceUnavailable &&
		r.header.Get("Content-Type") == "application/problem+json" && r.header.Get("Retry-After") != "" {
		l.unavailable.Add(1)
		l.unavailableAt = append(l.unavailableAt, time.Now().Add(-r.took))
		return false
	}
	if len(l.bad) < 20 {
		l.bad = append(l.bad, fmt.Sprintf("%s: status %d, error %v, Retry-After %q: %s",
			what, r.status, r.err, r.header.Get("Retry-After"), r.body))
	}
	return false
}

// start runs the load on c: two senders, one publisher, two consumers of
// the queue and one of the subscription. The function it returns stops
// them and waits until they have.
func (l *ledger) start(c *failoverClient) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() { l.sendLoop(ctx, c, g) })
		wg.Go(func() { l.consumeLoop(ctx, c, "/v1/queues/work", l.queue) })
	}
	wg.Go(func() { l.publishLoop(ctx, c) })
	wg.Go(func() { l.consumeLoop(ctx, c, "/v1/topics/log/subscriptions/all", l.sub) })
	return func() { cancel(); wg.Wait() }
}

// sendLoop sends batches of three messages with dedup ids until ctx is
// done, retrying each batch with the same ids until it is answered 2xx.
func (l *ledger) sendLoop(ctx context.Context, c *failoverClient, g int) {
	for i := 0; ctx.Err() == nil; i++ {
		var msgs []map[string]any
		for j := range 3 {
			msgs = append(msgs, map[string]any{"body": i, "dedup_id": fmt.Sprintf("s%d-%d-%d", g, i, j)})
		}
		for {
			begin := time.Now()
			r := c.do("POST", "/v1/queues/work/messages", map[string]any{"messages": msgs})
			if l.ok("send", r) {
				var out struct {
					Messages []struct {
						ID        string
						Duplicate bool
					}
				}
				if json.Unmarshal(r.body, &out) == nil && len(out.Messages) == len(msgs) {
					l.recordSend(msgs, out.Messages, begin)
				} else {
					l.ok("send answer", failoverResponse{status: -1, body: r.body})
				}
				break
			}
			time.Sleep(50 * time.Millisecond) // a client's pause before retrying a 503
		}
	}
}

func (l *ledger) recordSend(msgs []map[string]any, ids []struct {
	ID        string
	Duplicate bool
}, begin time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, m := range msgs {
		d := m["dedup_id"].(string)
		if prev, seen := l.sent[d]; seen && prev != ids[k].ID {
			l.bad = append(l.bad, fmt.Sprintf("dedup id %s answered as message %s and %s", d, prev, ids[k].ID))
		}
		l.sent[d] = ids[k].ID
		if ids[k].Duplicate {
			l.duplicates++
		}
	}
	now := time.Now()
	l.okAt = append(l.okAt, now)
	l.sendOKAt = append(l.sendOKAt, [2]time.Time{begin, now})
}

// publishLoop publishes batches of three events until ctx is done,
// retrying each batch with the same event ids until it is answered 2xx.
func (l *ledger) publishLoop(ctx context.Context, c *failoverClient) {
	for i := 0; ctx.Err() == nil; i++ {
		var evs []map[string]any
		for j := range 3 {
			evs = append(evs, map[string]any{"id": fmt.Sprintf("e-%d-%d", i, j), "type": "t", "key": fmt.Sprint(j)})
		}
		for !l.ok("publish", c.do("POST", "/v1/topics/log/events", map[string]any{"events": evs})) {
			time.Sleep(50 * time.Millisecond)
		}
		l.mu.Lock()
		for _, e := range evs {
			l.published[e["id"].(string)] = true
		}
		l.okAt = append(l.okAt, time.Now())
		l.mu.Unlock()
	}
}

// consumeLoop receives from path and acks what it got until ctx is done.
func (l *ledger) consumeLoop(ctx context.Context, c *failoverClient, path string, acked *acks) {
	for ctx.Err() == nil {
		if _, ok := l.consumeOnce(c, path, acked, 1); !ok {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// consumeOnce receives up to 10 deliveries from path (waiting up to wait
// seconds) and acks them; it returns how many it received and whether
// both calls were answered 2xx.
func (l *ledger) consumeOnce(c *failoverClient, path string, acked *acks, wait int) (int, bool) {
	r := c.do("POST", path+"/receive", map[string]any{"max_messages": 10, "wait_seconds": wait})
	if !l.ok("receive", r) {
		return 0, false
	}
	var out struct {
		Messages []struct {
			ID           string `json:"id"`
			Receipt      string `json:"receipt"`
			ReceiveCount int    `json:"receive_count"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || len(out.Messages) == 0 {
		return 0, err == nil
	}
	receipts := make([]string, len(out.Messages))
	l.mu.Lock()
	for i, m := range out.Messages {
		receipts[i] = m.Receipt
		l.received = append(l.received, receivedAt{acked: acked, id: m.ID, receiveCount: m.ReceiveCount})
	}
	l.mu.Unlock()
	a := c.do("POST", path+"/ack", map[string]any{"receipts": receipts})
	if !l.ok("ack", a) {
		l.mu.Lock()
		for _, m := range out.Messages {
			acked.unknown[m.ID] = true
		}
		l.mu.Unlock()
		return len(out.Messages), false
	}
	var res struct{ Results []struct{ Status string } }
	if json.Unmarshal(a.body, &res) != nil || len(res.Results) != len(out.Messages) {
		l.ok("ack answer", failoverResponse{status: -1, body: a.body})
		return len(out.Messages), false
	}
	l.mu.Lock()
	for i, m := range out.Messages {
		if res.Results[i].Status == "ok" {
			acked.ok[m.ID] = m.ReceiveCount
		}
	}
	l.mu.Unlock()
	return len(out.Messages), true
}

func (l *ledger) unavailableSince(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return countAfter(l.unavailableAt, at)
}

// countAfter is how many of ts are after at.
func countAfter(ts []time.Time, at time.Time) int {
	n := 0
	for _, t := range ts {
		if t.After(at) {
			n++
		}
	}
	return n
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (l *ledger) successes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.okAt)
}

func (l *ledger) successesSince(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return countAfter(l.okAt, at)
}

// firstSendAfter is when the first send begun after at was answered 2xx.
func (l *ledger) firstSendAfter(at time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, s := range l.sendOKAt {
		if s[0].After(at) && (first.IsZero() || s[1].Before(first)) {
			first = s[1]
		}
	}
	return first
}

func (l *ledger) sentIDs() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := map[string]bool{}
	for _, id := range l.sent {
		ids[id] = true
	}
	return ids
}

func (l *ledger) publishedIDs() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := map[string]bool{}
	for id := range l.published {
		ids[id] = true
	}
	return ids
}

// requireClean fails the test if a client met anything but a 2xx or a
// proper 503, or if a message was delivered again after an ok ack (a later
// delivery has a higher receive_count than the acked one).
func (l *ledger) requireClean(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.bad, "every answer is a 2xx or a 503 problem with Retry-After")
	for _, r := range l.received {
		if n, ok := r.acked.ok[r.id]; ok {
			require.LessOrEqual(t, r.receiveCount, n, "%s was delivered again (receive %d) after its receive %d was acked",
				r.id, r.receiveCount, n)
		}
	}
}

// requireOnNewPrimary reads back, on the promoted standby, every
// acknowledged send (one message per dedup id, the one answered; still
// queued unless its ack was ok) and publish (exactly one event per id).
func (l *ledger) requireOnNewPrimary(t *testing.T, dbURL string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	dedup := map[string]string{}
	rows, err := conn.Query(ctx, `SELECT d.dedup_id, d.message_id FROM ferry.dedup d
		JOIN ferry.queues q ON q.id = d.queue_id WHERE q.name = 'work'`)
	require.NoError(t, err)
	for rows.Next() {
		var d string
		var id int64
		require.NoError(t, rows.Scan(&d, &id))
		dedup[d] = store.FormatMessageID(id)
	}
	require.NoError(t, rows.Err())
	live := map[string]bool{}
	for _, id := range queryAll[int64](t, conn, `SELECT m.id FROM ferry.messages m
		JOIN ferry.queues q ON q.id = m.queue_id WHERE q.name = 'work'`) {
		live[store.FormatMessageID(id)] = true
	}
	events := map[string]int{}
	for _, id := range queryAll[string](t, conn, `SELECT e.id FROM ferry.events e
		JOIN ferry.topics tp ON tp.id = e.topic_id WHERE tp.name = 'log'`) {
		events[id]++
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Len(t, dedup, len(l.sent), "one message per dedup id, no more: retried sends were not written twice")
	for d, id := range l.sent {
		require.Equal(t, id, dedup[d], "dedup id %s: the message answered is the one on the new primary", d)
		_, acked := l.queue.ok[id]
		if acked {
			require.False(t, live[id], "message %s, acked ok, is gone", id)
		} else if !l.queue.unknown[id] {
			require.True(t, live[id], "message %s, never acked, is still queued", id)
		}
	}
	sentIDs := map[string]bool{}
	for _, id := range l.sent {
		sentIDs[id] = true
	}
	for id := range live {
		require.True(t, sentIDs[id], "queued message %s is one the load sent", id)
	}
	require.Len(t, events, len(l.published), "no event the load did not publish")
	for id := range l.published {
		require.Equal(t, 1, events[id], "event %s is on the new primary exactly once", id)
	}
	t.Logf("on the new primary: %d acknowledged messages (%d acked by consumers; %d answered as duplicates "+
		"to retried sends whose first attempt had committed) and %d acknowledged events",
		len(l.sent), len(l.queue.ok), l.duplicates, len(l.published))
}

func queryAll[T any](t *testing.T, conn *pgx.Conn, sql string) []T {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[T])
	require.NoError(t, err)
	return out
}

// drain receives and acks from path until nothing is left (none
// available, in flight or delayed); then every id of want was acked, ok
// or with an answer lost (then it is gone: its ack committed), and
// nothing else was delivered.
func (l *ledger) drain(t *testing.T, c *failoverClient, path string, acked *acks, want map[string]bool) {
	t.Helper()
	await(t, 60*time.Second, func() bool {
		n, ok := l.consumeOnce(c, path, acked, 0)
		if !ok || n > 0 {
			return false
		}
		r := c.do("GET", path, nil)
		var q struct {
			Stats struct {
				Available int `json:"available"`
				InFlight  int `json:"in_flight"`
				Delayed   int `json:"delayed"`
			} `json:"stats"`
		}
		return l.ok("stats", r) && json.Unmarshal(r.body, &q) == nil &&
			q.Stats.Available+q.Stats.InFlight+q.Stats.Delayed == 0
	}, path+" drains")
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range acked.ok {
		require.True(t, want[id], "%s: %s was delivered but never acknowledged to a producer", path, id)
	}
	lost := 0
	for id := range want {
		if _, ok := acked.ok[id]; !ok {
			require.True(t, acked.unknown[id], "%s: %s was acknowledged to its producer but never delivered", path, id)
			lost++
		}
	}
	t.Logf("%s: %d deliveries acked ok, %d gone by an ack whose answer was lost", path, len(acked.ok), lost)
}

// TestUnansweringHostIsPassedOver: a primary whose machine is gone
// answers nothing, and a connection attempt to it waits for a timeout
// before pgx tries the next host of the URL. With no connect_timeout in
// the URL, Ferry bounds each attempt itself (pgx's notifier connection
// would otherwise wait forever, the pool's for two minutes), so it finds
// the answering primary behind the silent host: /readyz is 200 and the
// notifier LISTENs.
func TestUnansweringHostIsPassedOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCluster(t, t.TempDir())
	require.NoError(t, migrations.Up(ctx, c.URL("ferry")))

	// The silent host accepts connections and never says a word.
	silent, _ := pgtest.SilentHost(t)

	url := fmt.Sprintf("postgres://postgres@%s,127.0.0.1:%d/ferry?sslmode=disable&target_session_attrs=read-write"+
		"&application_name=ferry-silent", silent, c.Port())
	begin := time.Now()
	env := ferrytest.StartOn(t, url, func(cfg *server.Config) { cfg.SkipMigrations = true })
	client := newFailoverClient(t, env)
	await(t, 30*time.Second, func() bool {
		r := client.do("GET", "/readyz", nil)
		require.NoError(t, r.err)
		return r.status == http.StatusOK
	}, "/readyz answers 200 through the host behind the silent one")
	ready := time.Since(begin)
	await(t, 30*time.Second, func() bool {
		return queryOne[int](t, c.URL("ferry"), `SELECT count(*)::int FROM pg_stat_activity
			WHERE application_name = 'ferry-silent' AND query = 'LISTEN ferry_messages'`) > 0
	}, "the notifier LISTENs on the host behind the silent one")
	t.Logf("behind a silent first host: ready %s, listening %s after the start",
		ready.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
}
