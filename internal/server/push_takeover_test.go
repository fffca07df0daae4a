package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// DESIGN.md invariant 13, issue 9 item 1: when the instance delivering a
// push target is killed (kill -9 of a real process), another instance
// resumes the delivery within seconds (bound 15 s, target 5 s), without
// ever two deliverers of one target at once (max_in_flight holds across
// the kill), losing nothing acknowledged, and keeping an ordered
// subscription's keys in order (the message in flight at the kill may be
// pushed again: at-least-once).
func TestPushTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	bin := buildFerry(t)
	dbURL := pgtest.NewDatabase(t)
	rc := newTakeoverReceiver(t, 40*time.Millisecond)

	a := startFerry(t, bin, dbURL, "a")
	api := a.env(t)
	const messages, keys, perKey = 120, 4, 30
	require.Equal(t, http.StatusCreated, api.Do("PUT", "/v1/queues/jobs", map[string]any{
		"retry_min_seconds": 0, "retry_max_seconds": 1,
		"push": map[string]any{"url": rc.url("/q"), "max_in_flight": 1, "timeout_seconds": 2},
	}).Status)
	require.Equal(t, http.StatusCreated, api.Do("PUT", "/v1/topics/events", map[string]any{"partitions": 2}).Status)
	require.Equal(t, http.StatusCreated, api.Do("PUT", "/v1/topics/events/subscriptions/ordered", map[string]any{
		"ordered": true, "retry_min_seconds": 0, "retry_max_seconds": 1,
		"push": map[string]any{"url": rc.url("/s"), "max_in_flight": 2, "timeout_seconds": 2},
	}).Status)
	sent := sendBacklog(t, api, messages)
	published := publishBacklog(t, api, keys, perKey)

	// A delivers both; then B starts on the same database.
	waitFor(t, 30*time.Second, "A delivering both targets", func() bool { return rc.count("/q") >= 5 && rc.count("/s") >= 5 })
	owners := leaseOwners(t, dbURL)
	require.Equal(t, map[string]string{"jobs": a.instance, "ordered": a.instance}, owners, "A holds both leases")
	b := startFerry(t, bin, dbURL, "b")
	waitFor(t, 30*time.Second, "a backlog left to take over", func() bool { return rc.count("/q") >= 30 && rc.count("/s") >= 30 })
	require.Equal(t, owners, leaseOwners(t, dbURL), "B does not take live leases")

	killedAt := a.kill(t)
	for _, path := range []string{"/q", "/s"} {
		waitFor(t, 20*time.Second, "delivery resumed on "+path, func() bool { return rc.firstAfter(path, killedAt) != nil })
		took := rc.firstAfter(path, killedAt).Sub(killedAt)
		t.Logf("%s: delivery resumed %s after kill -9 of the serving instance", path, took.Round(time.Millisecond))
		require.LessOrEqual(t, took, 15*time.Second, "takeover of %s within the bound", path)
	}
	require.Contains(t, []string{b.instance, ""}, leaseOwners(t, dbURL)["jobs"], "B holds what A held")

	// Everything is delivered and acked (the messages A had in flight come
	// back when their leases end), once per key in order, and never more
	// at once than max_in_flight.
	apiB := b.env(t)
	waitFor(t, 90*time.Second, "both targets drained", func() bool {
		return drained(t, apiB, "/v1/queues/jobs") && drained(t, apiB, "/v1/topics/events/subscriptions/ordered")
	})
	rc.requireDelivered(t, "/q", sent)
	rc.requireDelivered(t, "/s", published)
	rc.requireOrdered(t, "/s")
	require.LessOrEqual(t, rc.peakOf("/q"), 1, "max_in_flight 1 of the queue held across the takeover")
	require.LessOrEqual(t, rc.peakOf("/s"), 2, "max_in_flight 2 of the subscription held across the takeover")
	require.Empty(t, rc.keyOverlaps(), "never two events of one key in flight")
}

// buildFerry builds cmd/ferry into a temporary directory.
func buildFerry(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ferry")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/ferry-mq/ferry/cmd/ferry").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// ferryProc is `ferry serve` running as a process of its own.
type ferryProc struct {
	name     string
	cmd      *exec.Cmd
	url      string
	dbURL    string
	instance string // its push lease owner id
	mu       sync.Mutex
	log      strings.Builder
}

var (
	servingAddr  = regexp.MustCompile(`msg="ferry serving" addr=(\S+)`)
	pushInstance = regexp.MustCompile(`msg="push delivery" instance=(\S+)`)
)

// startFerry starts `ferry serve` on the database and waits until it
// serves; it is stopped (SIGTERM) at the end of the test, and its log is
// shown if the test failed.
func startFerry(t *testing.T, bin, dbURL, name string) *ferryProc {
	t.Helper()
	p := &ferryProc{name: name, cmd: exec.Command(bin, "serve"), dbURL: dbURL}
	p.cmd.Env = append(p.cmd.Environ(),
		"FERRY_DATABASE_URL="+dbURL, "FERRY_ADMIN_KEY="+ferrytest.AdminKey, "FERRY_LISTEN=127.0.0.1:0",
		"FERRY_ALLOW_PRIVATE_PUSH=true", "FERRY_LOG_LEVEL=info", "FERRY_DB_MAX_CONNS=10")
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	ready := make(chan struct{})
	go p.scan(stderr, ready)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("ferry %s log:\n%s", p.name, p.log.String())
			p.mu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("ferry %s did not start:\n%s", name, p.log.String())
	}
	return p
}

// scan keeps the process's log and closes ready once it names its address
// and its push instance id.
func (p *ferryProc) scan(r io.Reader, ready chan struct{}) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.log.WriteString(line + "\n")
		if m := pushInstance.FindStringSubmatch(line); m != nil {
			p.instance = m[1]
		}
		if m := servingAddr.FindStringSubmatch(line); m != nil {
			p.url = "http://" + m[1]
			if p.instance != "" {
				close(ready)
			}
		}
		p.mu.Unlock()
	}
}

// env is a spec-validating client of the process's API.
func (p *ferryProc) env(t *testing.T) *ferrytest.Env {
	return &ferrytest.Env{T: t, URL: p.url, DatabaseURL: p.dbURL, Client: openapitest.New(t).Client(t, nil)}
}

// kill kills the process with SIGKILL and returns when it is gone.
func (p *ferryProc) kill(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
	return at
}

// sendBacklog sends n messages to queue jobs in batches; it returns the
// ids the 2xx answers gave.
func sendBacklog(t *testing.T, api *ferrytest.Env, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i += 20 {
		var msgs []map[string]any
		for j := i; j < min(n, i+20); j++ {
			msgs = append(msgs, map[string]any{"body": map[string]any{"n": j}})
		}
		ids = append(ids, sendMessages(t, api, "jobs", msgs)...)
	}
	require.Len(t, ids, n)
	return ids
}

// publishBacklog publishes perKey events for each of keys keys, in order
// per key (data.n), interleaved; it returns their ids.
func publishBacklog(t *testing.T, api *ferrytest.Env, keys, perKey int) []string {
	t.Helper()
	var ids []string
	for n := 0; n < perKey; n += 5 {
		var evs []map[string]any
		for i := n; i < min(perKey, n+5); i++ {
			for k := range keys {
				id := fmt.Sprintf("k%d-%03d", k, i)
				evs = append(evs, map[string]any{"id": id, "type": "t", "key": fmt.Sprintf("k%d", k), "data": map[string]any{"n": i}})
				ids = append(ids, id)
			}
		}
		r := api.Do("POST", "/v1/topics/events/events", map[string]any{"events": evs})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	return ids
}

// leaseOwners maps each leased target's name to its lease's owner.
func leaseOwners(t *testing.T, dbURL string) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT q.name, l.owner::text FROM ferry.push_leases l JOIN ferry.queues q ON q.id = l.queue_id`)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var name, owner string
		require.NoError(t, rows.Scan(&name, &owner))
		out[name] = owner
	}
	require.NoError(t, rows.Err())
	return out
}

// drained: the queue (or subscription) at path holds nothing, and no
// dead letters.
func drained(t *testing.T, api *ferrytest.Env, path string) bool {
	r := api.Do("GET", path, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct {
		// The wire names: untagged, InFlight and DeadLetters matched
		// nothing ("in_flight", "dead_letters") and stayed 0, so a target
		// whose last message was in flight passed for drained.
		Stats struct {
			Available   int `json:"available"`
			InFlight    int `json:"in_flight"`
			Delayed     int `json:"delayed"`
			DeadLetters int `json:"dead_letters"`
		} `json:"stats"`
	}
	r.JSON(t, &out)
	require.Zero(t, out.Stats.DeadLetters, "%s: nothing dead-lettered", path)
	done := out.Stats.Available == 0 && out.Stats.InFlight == 0 && out.Stats.Delayed == 0
	if done && api.DatabaseURL != "" {
		requireNoLiveMessages(t, api.DatabaseURL, path)
	}
	return done
}

// requireNoLiveMessages checks what the stats said (drained) against the
// messages table itself.
func requireNoLiveMessages(t *testing.T, dbURL, path string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	parts := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")
	var live []string
	q := `SELECT m.id || ' receive_count=' || m.receive_count || ' waiting=' || m.waiting || ' visible_at=' || m.visible_at || ' claimed=' || (m.claim_token IS NOT NULL)
		FROM ferry.messages m JOIN ferry.queues q ON q.id = m.queue_id`
	var rows pgx.Rows
	if parts[0] == "queues" {
		rows, err = conn.Query(ctx, q+` WHERE q.name = $1 AND q.topic_id IS NULL`, parts[1])
	} else {
		rows, err = conn.Query(ctx, q+` JOIN ferry.topics t ON t.id = q.topic_id WHERE t.name = $1 AND q.name = $2`, parts[1], parts[3])
	}
	require.NoError(t, err)
	live, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, live, "%s: the stats say drained, but these messages are live", path)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ferrytest.WaitFor(t, d, what, cond)
}

// takeoverReceiver is a slow webhook endpoint that records every delivery
// and counts the requests in flight per path (target) and per event key.
type takeoverReceiver struct {
	srv   *httptest.Server
	delay time.Duration

	mu       sync.Mutex
	got      map[string][]delivery // by path, in arrival order
	inFlight map[string]int
	peak     map[string]int
	keys     map[string]int // event key → requests in flight
	overlaps []string
}

// delivery is one request: its webhook id, its event key and n (for the
// subscription), and when it arrived.
type delivery struct {
	id, key string
	n       int
	at      time.Time
}

func newTakeoverReceiver(t *testing.T, delay time.Duration) *takeoverReceiver {
	rc := &takeoverReceiver{
		delay: delay, got: map[string][]delivery{}, inFlight: map[string]int{}, peak: map[string]int{}, keys: map[string]int{},
	}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *takeoverReceiver) url(path string) string { return rc.srv.URL + path }

func (rc *takeoverReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev struct {
		Key  *string `json:"key"`
		Data struct {
			N int `json:"n"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	d := delivery{id: r.Header.Get("webhook-id"), n: ev.Data.N, at: time.Now()}
	if ev.Key != nil {
		d.key = *ev.Key
	}
	path := r.URL.Path
	rc.mu.Lock()
	rc.got[path] = append(rc.got[path], d)
	rc.inFlight[path]++
	rc.peak[path] = max(rc.peak[path], rc.inFlight[path])
	if d.key != "" {
		if rc.keys[d.key]++; rc.keys[d.key] > 1 {
			rc.overlaps = append(rc.overlaps, d.id)
		}
	}
	rc.mu.Unlock()
	select {
	case <-time.After(rc.delay):
	case <-r.Context().Done(): // its sender died
	}
	rc.mu.Lock()
	rc.inFlight[path]--
	if d.key != "" {
		rc.keys[d.key]--
	}
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rc *takeoverReceiver) count(path string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got[path])
}

// firstAfter is when the first request to path after t arrived (nil: none
// yet).
func (rc *takeoverReceiver) firstAfter(path string, t time.Time) *time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, d := range rc.got[path] {
		if d.at.After(t) {
			return &d.at
		}
	}
	return nil
}

func (rc *takeoverReceiver) peakOf(path string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.peak[path]
}

func (rc *takeoverReceiver) keyOverlaps() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.overlaps
}

// requireDelivered: every id was delivered at least once, and nothing else.
func (rc *takeoverReceiver) requireDelivered(t *testing.T, path string, ids []string) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	seen := map[string]int{}
	for _, d := range rc.got[path] {
		seen[d.id]++
	}
	again := 0
	for _, id := range ids {
		require.Positive(t, seen[id], "%s: %s was acknowledged by its send but never delivered", path, id)
		again += seen[id] - 1
	}
	require.Len(t, seen, len(ids), "%s: only what was sent", path)
	t.Logf("%s: %d delivered, %d of them more than once", path, len(ids), again)
}

// requireOrdered: per key, the first deliveries of its events come in
// publish order.
func (rc *takeoverReceiver) requireOrdered(t *testing.T, path string) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, d := range rc.got[path] {
		if seen[d.id] {
			continue
		}
		seen[d.id] = true
		if n, ok := last[d.key]; ok {
			require.Greater(t, d.n, n, "%s: key %s delivered %s after n=%d", path, d.key, d.id, n)
		}
		last[d.key] = d.n
	}
}
