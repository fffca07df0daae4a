package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// Ferry behind PgBouncer in transaction pooling mode (issue 9 item 7;
// internal/server/pools.go says what goes over which URL and why).

// bouncerPoolSize is PgBouncer's default_pool_size in these tests: fewer
// server connections than one Ferry's pool (ferrytest: 10), so
// transactions of different Ferry connections share servers.
const bouncerPoolSize = 3

// behindBouncer is a throwaway cluster with a database "ferry", and
// PgBouncer in front of it.
type behindBouncer struct {
	cluster *pgcluster.Cluster
	bouncer *pgcluster.Bouncer
}

// startBehindBouncer starts the cluster and PgBouncer (transaction mode,
// poolSize servers, handed out round robin so that consecutive
// transactions of one client land on different servers).
func startBehindBouncer(t *testing.T, poolSize int) behindBouncer {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	c := startCluster(t, dir)

	b, err := pgcluster.StartBouncer(ctx, pgcluster.BouncerOptions{
		Dir: filepath.Join(dir, "bouncer"), Upstream: c, PoolMode: "transaction", PoolSize: poolSize,
		Settings: map[string]string{"server_round_robin": "1"}, Logf: t.Logf,
	})
	require.NoError(t, err, "Ferry's PgBouncer tests need PgBouncer: apt-get install -y pgbouncer")
	t.Cleanup(b.Stop)
	return behindBouncer{cluster: c, bouncer: b}
}

// pooledURL is the database through PgBouncer, as application app.
func (s behindBouncer) pooledURL(app string) string {
	return s.bouncer.URL("ferry") + "&application_name=" + app
}

// directURL is the database straight on PostgreSQL, as application app.
func (s behindBouncer) directURL(app string) string {
	return s.cluster.URL("ferry") + "&application_name=" + app
}

// start boots a Ferry whose DATABASE_URL goes through PgBouncer and whose
// DATABASE_DIRECT_URL does not; its connections are named app (pooled)
// and app-direct.
func (s behindBouncer) start(t *testing.T, app string, opts ...ferrytest.Option) *ferrytest.Env {
	t.Helper()
	return ferrytest.StartOn(t, s.pooledURL(app), append([]ferrytest.Option{func(c *server.Config) {
		c.DatabaseDirectURL = s.directURL(app + "-direct")
		// Long polls are woken by NOTIFY or not at all within a test's
		// bounds: a fallback poll must not hide a LISTEN that does not work.
		c.FallbackPoll = 30 * time.Second
		c.AllowPrivatePush = true
	}}, opts...)...)
}

// pgx's default exec mode prepares named statements, which live on one
// server connection; PgBouncer 1.18 in transaction mode hands each
// transaction any server, so the second client to prepare the same
// statement on the shared server fails. QueryExecModeCacheDescribe
// (unnamed statements only), which Ferry uses behind a pooler, does not.
func TestPgBouncerDefaultExecModeFails(t *testing.T) {
	t.Parallel()
	s := startBehindBouncer(t, 1) // one server: deterministic sharing
	ctx := context.Background()

	run := func(mode string) []error {
		var errs []error
		for range 2 {
			conn, err := pgx.Connect(ctx, s.bouncer.URL("ferry")+"&default_query_exec_mode="+mode)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var n int
			errs = append(errs, conn.QueryRow(ctx, `SELECT $1::int + 1`, 41).Scan(&n))
			if errs[len(errs)-1] == nil {
				require.Equal(t, 42, n)
			}
		}
		return errs
	}

	errs := run("cache_statement") // pgx's default
	require.NoError(t, errs[0])
	var pgErr *pgconn.PgError
	require.ErrorAs(t, errs[1], &pgErr, "the second client's prepare of the same statement on the same server")
	require.Equal(t, "42P05", pgErr.Code, "prepared statement already exists: %v", errs[1])

	require.Equal(t, []error{nil, nil}, run("cache_describe"))
}

// A walkthrough of the API through PgBouncer, two Ferry instances on one
// database: queues (send, receive, ack, nack, dead letters, redrive),
// concurrent sends and receives across instances, a topic with a pull
// subscription, a push subscription and a consumer group, a seek; and
// long polls on one instance woken within milliseconds by sends and
// publishes on the other, which only a LISTEN on a real session (the
// direct URL) can do: the fallback poll is 30 s.
func TestPgBouncerWalkthrough(t *testing.T) {
	t.Parallel()
	s := startBehindBouncer(t, bouncerPoolSize)
	a := s.start(t, "ferry-a")
	b := s.start(t, "ferry-b")
	require.Equal(t, pgx.QueryExecModeCacheDescribe, a.Server.Pool().Config().ConnConfig.DefaultQueryExecMode,
		"behind a transaction pooler (a direct URL is set) the hot path uses unnamed statements")

	bouncerQueueWalkthrough(t, a, b)
	bouncerConcurrentLoad(t, a, b)
	bouncerTopicWalkthrough(t, s, a, b)
	bouncerWakes(t, s, a, b)

	// The LISTEN connections are on the direct URL, one per instance.
	direct := bouncerConnect(t, s.directURL("test"))
	var listeners []string
	rows, err := direct.Query(context.Background(), `SELECT application_name FROM pg_stat_activity
		WHERE datname = 'ferry' AND query = 'LISTEN ferry_messages' ORDER BY 1`)
	require.NoError(t, err)
	listeners, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"ferry-a-direct", "ferry-b-direct"}, listeners)
	// River (its LISTEN, leader election and job fetches) too: one of its
	// statements (sqlc's "-- name: ..." header; leader election runs every
	// 5 s, the fetch poll every 30 s) is seen on the direct sessions.
	require.Eventually(t, func() bool {
		var n int
		err := direct.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = 'ferry' AND application_name LIKE 'ferry-_-direct' AND query LIKE '-- name: %'`).Scan(&n)
		return err == nil && n > 0
	}, 20*time.Second, 5*time.Millisecond, "River's statements run on the direct pool")

	// Ferry's pools opened more connections than PgBouncer has servers:
	// their transactions shared them.
	opened := a.Server.Pool().Stat().NewConnsCount() + b.Server.Pool().Stat().NewConnsCount()
	t.Logf("the two instances' pools opened %d connections to PgBouncer, which has %d server connections",
		opened, bouncerPoolSize)
	require.Greater(t, opened, int64(bouncerPoolSize))
}

func bouncerConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// bouncerMessage is a received message or delivery.
type bouncerMessage struct {
	ID           string          `json:"id"`
	Body         json.RawMessage `json:"body"`
	Receipt      string          `json:"receipt"`
	ReceiveCount int             `json:"receive_count"`
}

func bouncerOK(t *testing.T, r ferrytest.Response, status int, what string) ferrytest.Response {
	t.Helper()
	require.Equal(t, status, r.Status, "%s: %s", what, r.Body)
	return r
}

func bouncerReceive(t *testing.T, env *ferrytest.Env, path string, req map[string]any) []bouncerMessage {
	t.Helper()
	var out struct {
		Messages []bouncerMessage `json:"messages"`
	}
	bouncerOK(t, env.Do("POST", path+"/receive", req), http.StatusOK, "receive "+path).JSON(t, &out)
	return out.Messages
}

func bouncerSettle(t *testing.T, env *ferrytest.Env, path, action string, req map[string]any) {
	t.Helper()
	var out struct {
		Results []struct{ Status string } `json:"results"`
	}
	bouncerOK(t, env.Do("POST", path+"/"+action, req), http.StatusOK, action+" "+path).JSON(t, &out)
	for _, r := range out.Results {
		require.Equal(t, "ok", r.Status, "%s %s", action, path)
	}
}

func bouncerReceipts(ms []bouncerMessage) []string {
	var rs []string
	for _, m := range ms {
		rs = append(rs, m.Receipt)
	}
	return rs
}

func bouncerQueueWalkthrough(t *testing.T, a, b *ferrytest.Env) {
	const q = "/v1/queues/orders"
	bouncerOK(t, a.Do("PUT", q, map[string]any{"visibility_timeout_seconds": 60, "max_receives": 3}), http.StatusCreated, "create queue")
	bouncerOK(t, a.Do("POST", q+"/messages", map[string]any{"messages": []map[string]any{
		{"body": map[string]any{"order": 1}, "dedup_id": "o-1", "group": "cust-42"},
		{"body": map[string]any{"order": 2}},
		{"body": map[string]any{"order": 3}},
	}}), http.StatusCreated, "send")
	got := bouncerReceive(t, b, q, map[string]any{"max_messages": 10, "wait_seconds": 5})
	require.Len(t, got, 3)
	bouncerSettle(t, b, q, "ack", map[string]any{"receipts": []string{got[0].Receipt}})
	// A nack for a retry: visible again at once, received a second time.
	bouncerSettle(t, a, q, "nack", map[string]any{"receipts": []string{got[1].Receipt}})
	again := bouncerReceive(t, a, q, map[string]any{"max_messages": 10, "wait_seconds": 5})
	require.Len(t, again, 1)
	require.Equal(t, got[1].ID, again[0].ID)
	require.Equal(t, 2, again[0].ReceiveCount)
	bouncerSettle(t, a, q, "ack", map[string]any{"receipts": bouncerReceipts(again)})
	// A nack to the dead letters, then a redrive back.
	bouncerSettle(t, b, q, "nack", map[string]any{"receipts": []string{got[2].Receipt}, "dead_letter": true, "error": "no such customer"})
	var dead struct {
		Messages []struct {
			ID    string  `json:"id"`
			Error *string `json:"error"`
		} `json:"messages"`
	}
	bouncerOK(t, a.Do("GET", q+"/dead-letters", nil), http.StatusOK, "dead letters").JSON(t, &dead)
	require.Len(t, dead.Messages, 1)
	require.Equal(t, got[2].ID, dead.Messages[0].ID)
	var redriven struct {
		Redriven int `json:"redriven"`
	}
	bouncerOK(t, b.Do("POST", q+"/dead-letters/redrive", map[string]any{"limit": 100}), http.StatusOK, "redrive").JSON(t, &redriven)
	require.Equal(t, 1, redriven.Redriven)
	back := bouncerReceive(t, a, q, map[string]any{"max_messages": 10, "wait_seconds": 5})
	require.Len(t, back, 1)
	require.Equal(t, got[2].ID, back[0].ID)
	bouncerSettle(t, a, q, "ack", map[string]any{"receipts": bouncerReceipts(back)})
	var st struct {
		Messages    int64 `json:"messages"`
		DeadLetters int64 `json:"dead_letters"`
	}
	bouncerOK(t, b.Do("GET", q, nil), http.StatusOK, "queue").JSON(t, &st)
	require.Zero(t, st.Messages)
	require.Zero(t, st.DeadLetters)
}

// bouncerConcurrentLoad sends single messages from several goroutines to
// both instances while others receive and ack from both: more Ferry
// connections at once than PgBouncer has servers. Every message is acked
// exactly once.
func bouncerConcurrentLoad(t *testing.T, a, b *ferrytest.Env) {
	const (
		q       = "/v1/queues/load"
		senders = 6
		each    = 20
	)
	bouncerOK(t, a.Do("PUT", q, map[string]any{"visibility_timeout_seconds": 30}), http.StatusCreated, "create queue")
	envs := []*ferrytest.Env{a, b}
	var (
		mu    sync.Mutex
		acked = map[string]int{}
		errs  []error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for i := range senders {
		wg.Go(func() {
			for j := range each {
				r := bouncerDo(envs[(i+j)%2], "POST", q+"/messages", map[string]any{"messages": []map[string]any{{"body": i*each + j}}})
				if r.err != nil || r.status != http.StatusCreated {
					fail(fmt.Errorf("send: %v %d %s", r.err, r.status, r.body))
				}
			}
		})
	}
	done := make(chan struct{})
	var recv sync.WaitGroup
	for i := range 4 {
		recv.Go(func() {
			for {
				env := envs[i%2]
				r := bouncerDo(env, "POST", q+"/receive", map[string]any{"max_messages": 10, "wait_seconds": 1})
				var out struct {
					Messages []bouncerMessage `json:"messages"`
				}
				if r.err != nil || r.status != http.StatusOK || json.Unmarshal(r.body, &out) != nil {
					fail(fmt.Errorf("receive: %v %d %s", r.err, r.status, r.body))
					return
				}
				if len(out.Messages) == 0 {
					select {
					case <-done:
						return
					default:
						continue
					}
				}
				a := bouncerDo(envs[(i+1)%2], "POST", q+"/ack", map[string]any{"receipts": bouncerReceipts(out.Messages)})
				if a.err != nil || a.status != http.StatusOK {
					fail(fmt.Errorf("ack: %v %d %s", a.err, a.status, a.body))
					return
				}
				mu.Lock()
				for _, m := range out.Messages {
					acked[m.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == senders*each || len(errs) > 0
	}, 30*time.Second, 10*time.Millisecond)
	close(done)
	recv.Wait()
	require.Empty(t, errs)
	require.Len(t, acked, senders*each)
	for id, n := range acked {
		require.Equal(t, 1, n, "message %s acked %d times", id, n)
	}
}

func bouncerTopicWalkthrough(t *testing.T, s behindBouncer, a, b *ferrytest.Env) {
	const topic = "/v1/topics/orders"
	hooks := make(chan string, 100)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hooks <- r.Header.Get("webhook-id")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	bouncerOK(t, a.Do("PUT", topic, map[string]any{"partitions": 2}), http.StatusCreated, "create topic")
	bouncerOK(t, b.Do("PUT", topic+"/subscriptions/billing", map[string]any{"start": "earliest"}), http.StatusCreated, "pull subscription")
	bouncerOK(t, a.Do("PUT", topic+"/subscriptions/hooks", map[string]any{"push": map[string]any{"url": receiver.URL}}),
		http.StatusCreated, "push subscription")
	var ids []string
	var events []map[string]any
	for i := range 6 {
		id := fmt.Sprintf("evt-%d", i)
		ids = append(ids, id)
		events = append(events, map[string]any{"id": id, "type": "order.created", "key": fmt.Sprintf("k%d", i%3)})
	}
	bouncerOK(t, b.Do("POST", topic+"/events", map[string]any{"events": events}), http.StatusCreated, "publish")

	// The pull subscription gets every event once.
	bouncerDrain(t, a, topic+"/subscriptions/billing", ids)
	// The push subscription delivers every event to the receiver.
	pushed := map[string]bool{}
	for len(pushed) < len(ids) {
		select {
		case id := <-hooks:
			pushed[id] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("push delivered %d of %d events", len(pushed), len(ids))
		}
	}
	require.ElementsMatch(t, ids, bouncerKeys(pushed))

	bouncerGroupWalkthrough(t, a, b, topic, ids)
	bouncerSeek(t, s, a, b, topic, ids)
}

// bouncerGroupWalkthrough has a consumer group read the topic's events
// (ids) from both partitions and commit them.
func bouncerGroupWalkthrough(t *testing.T, a, b *ferrytest.Env, topic string, ids []string) {
	var seen []string
	var poll struct {
		Generation int64 `json:"generation"`
		Events     []struct {
			ID        string `json:"id"`
			Partition int    `json:"partition"`
			Offset    int64  `json:"offset"`
		} `json:"events"`
	}
	for len(seen) < len(ids) {
		bouncerOK(t, b.Do("POST", topic+"/groups/billing/poll", map[string]any{
			"consumer": "w1", "max_events": 100, "wait_seconds": 5, "start": "earliest",
		}), http.StatusOK, "group poll").JSON(t, &poll)
		require.NotEmpty(t, poll.Events, "the group has %d of %d events and the poll found none", len(seen), len(ids))
		offsets := map[string]int64{}
		for _, e := range poll.Events {
			seen = append(seen, e.ID)
			offsets[fmt.Sprint(e.Partition)] = max(offsets[fmt.Sprint(e.Partition)], e.Offset)
		}
		bouncerOK(t, a.Do("POST", topic+"/groups/billing/commit", map[string]any{
			"consumer": "w1", "generation": poll.Generation, "offsets": offsets,
		}), http.StatusNoContent, "commit")
	}
	require.ElementsMatch(t, ids, seen)
	var group struct {
		Partitions []struct {
			Lag int64 `json:"lag"`
		} `json:"partitions"`
	}
	bouncerOK(t, a.Do("GET", topic+"/groups/billing", nil), http.StatusOK, "group").JSON(t, &group)
	require.Len(t, group.Partitions, 2)
	for _, p := range group.Partitions {
		require.Zero(t, p.Lag)
	}
}

// bouncerSeek seeks the topic's pull subscription "billing" to the
// earliest event and receives its events (ids) again.
func bouncerSeek(t *testing.T, s behindBouncer, a, b *ferrytest.Env, topic string, ids []string) {
	// A seek of an unordered subscription holds the subscription's
	// advisory lock across its transactions: on a session (the direct
	// pool), released when it ends. Through PgBouncer the lock and the
	// unlock may land on different servers, which leaves the lock held on
	// a pooled server connection forever (redrives into it would hang).
	bouncerOK(t, a.Do("POST", topic+"/subscriptions/billing/seek", map[string]any{"to": "earliest"}), http.StatusNoContent, "seek")
	var held int
	require.NoError(t, bouncerConnect(t, s.directURL("test")).QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND a.state = 'idle'`).Scan(&held))
	require.Zero(t, held, "advisory locks held by idle sessions after the seek")
	bouncerDrain(t, b, topic+"/subscriptions/billing", ids)
}

// bouncerDrain receives and acks from path until every id was acked
// once.
func bouncerDrain(t *testing.T, env *ferrytest.Env, path string, ids []string) {
	t.Helper()
	var got []string
	for len(got) < len(ids) {
		ms := bouncerReceive(t, env, path, map[string]any{"max_messages": 10, "wait_seconds": 5})
		require.NotEmpty(t, ms, "%s: %d of %d received, then nothing", path, len(got), len(ids))
		for _, m := range ms {
			got = append(got, m.ID)
		}
		bouncerSettle(t, env, path, "ack", map[string]any{"receipts": bouncerReceipts(ms)})
	}
	require.ElementsMatch(t, ids, got)
}

// bouncerWakes parks long polls on b (a queue receive, a subscription
// receive, a group poll) and sends or publishes on a: each poll answers
// within maxWake. Another instance's send reaches b only through NOTIFY,
// and the fallback poll is 30 s, so this is b's LISTEN at work.
func bouncerWakes(t *testing.T, s behindBouncer, a, b *ferrytest.Env) {
	const maxWake = 500 * time.Millisecond
	bouncerOK(t, a.Do("PUT", "/v1/queues/wake", nil), http.StatusCreated, "create queue")
	bouncerOK(t, a.Do("PUT", "/v1/topics/wake", map[string]any{"partitions": 1}), http.StatusCreated, "create topic")
	bouncerOK(t, a.Do("PUT", "/v1/topics/wake/subscriptions/s", nil), http.StatusCreated, "create subscription")
	bouncerOK(t, a.Do("PUT", "/v1/topics/wake-g", map[string]any{"partitions": 1}), http.StatusCreated, "create topic")
	// The group's member joins first, so that its parked poll only waits.
	bouncerOK(t, b.Do("POST", "/v1/topics/wake-g/groups/g/poll", map[string]any{"consumer": "w", "start": "latest"}), http.StatusOK, "join")

	type round struct {
		name, poll string
		body       map[string]any
		send       func(marker string) ferrytest.Response
	}
	rounds := []round{{
		name: "queue receive", poll: "/v1/queues/wake/receive",
		body: map[string]any{"max_messages": 1, "wait_seconds": 20},
		send: func(marker string) ferrytest.Response {
			return a.Do("POST", "/v1/queues/wake/messages", map[string]any{"messages": []map[string]any{{"body": marker}}})
		},
	}, {
		name: "subscription receive", poll: "/v1/topics/wake/subscriptions/s/receive",
		body: map[string]any{"max_messages": 1, "wait_seconds": 20},
		send: func(marker string) ferrytest.Response {
			return a.Do("POST", "/v1/topics/wake/events", map[string]any{"events": []map[string]any{{"type": "t", "data": marker}}})
		},
	}, {
		name: "group poll", poll: "/v1/topics/wake-g/groups/g/poll",
		body: map[string]any{"consumer": "w", "wait_seconds": 20},
		send: func(marker string) ferrytest.Response {
			return a.Do("POST", "/v1/topics/wake-g/events", map[string]any{"events": []map[string]any{{"type": "t", "data": marker}}})
		},
	}}
	var all []time.Duration
	for _, r := range rounds {
		var took []time.Duration
		for i := range 3 {
			before := b.Server.LongPollsParked()
			res := make(chan bouncerResult, 1)
			go func() { res <- bouncerDo(b, "POST", r.poll, r.body) }()
			parkedOn(t, b, before)
			begin := time.Now()
			marker := fmt.Sprintf("wake-%s-%d", strings.ReplaceAll(r.name, " ", "-"), i)
			require.Equal(t, http.StatusCreated, r.send(marker).Status, "%s: send", r.name)
			got := <-res
			wake := got.at.Sub(begin)
			require.NoError(t, got.err)
			require.Equal(t, http.StatusOK, got.status, "%s: %s", r.name, got.body)
			require.Contains(t, string(got.body), marker, "%s: the poll answered without the new message", r.name)
			if r.name != "group poll" {
				var out struct {
					Messages []bouncerMessage `json:"messages"`
				}
				require.NoError(t, json.Unmarshal(got.body, &out))
				require.Len(t, out.Messages, 1)
				bouncerSettle(t, b, strings.TrimSuffix(r.poll, "/receive"), "ack", map[string]any{"receipts": bouncerReceipts(out.Messages)})
			}
			took = append(took, wake)
			require.Less(t, wake, maxWake, "%s on another instance woken %s after the send began", r.name, wake)
		}
		t.Logf("behind PgBouncer, %s on instance b woken by a send on instance a: %v after the send began", r.name, took)
		all = append(all, took...)
	}
	slices.Sort(all)
	t.Logf("long-poll wake through NOTIFY behind PgBouncer, %d rounds: median %s, max %s (bound %s)",
		len(all), all[len(all)/2], all[len(all)-1], maxWake)
}

// bouncerResult is a response read off the test's goroutine.
type bouncerResult struct {
	status int
	body   []byte
	err    error
	at     time.Time // when the whole response had arrived
}

// bouncerDo sends a request with the admin key through env's validating client
// without touching require (for goroutines).
func bouncerDo(env *ferrytest.Env, method, path string, body any) bouncerResult {
	raw, err := json.Marshal(body)
	if err != nil {
		return bouncerResult{err: err}
	}
	req, err := http.NewRequest(method, env.URL+path, strings.NewReader(string(raw)))
	if err != nil {
		return bouncerResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+ferrytest.AdminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := env.Client.Do(req)
	if err != nil {
		return bouncerResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return bouncerResult{status: resp.StatusCode, body: b, err: err, at: time.Now()}
}

func bouncerKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
