package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestWorkEvents: the subscription loop handles every matching event,
// retries one that fails once, and acks them all.
func TestWorkEvents(t *testing.T) {
	t.Parallel()
	_, c, rec := setup(t)
	ctx := context.Background()
	_, _, err := c.PutTopic(ctx, "t", client.TopicConfig{})
	require.NoError(t, err)
	_, _, err = c.PutSubscription(ctx, "t", "s", client.SubscriptionConfig{
		Filter: &client.Filter{Types: []string{"keep"}}, RetryMinSeconds: client.Ptr(0), RetryMaxSeconds: client.Ptr(0),
	})
	require.NoError(t, err)
	_, err = c.Publish(ctx, "t", client.PublishEvent{Type: "keep", ID: "a"}, client.PublishEvent{Type: "drop", ID: "b"}, client.PublishEvent{Type: "keep", ID: "c", Data: "x"})
	require.NoError(t, err)
	var mu sync.Mutex
	calls := map[string]int{}
	h := func(_ context.Context, d *client.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls[d.ID]++
		if d.ID == "c" && calls["c"] == 1 {
			require.JSONEq(t, `"x"`, string(d.Event.Data))
			return errors.New("once")
		}
		return nil
	}
	ctx2, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.WorkEvents(ctx2, "t", "s", h, client.WorkOptions{WaitSeconds: 1}) }()
	require.Eventually(t, func() bool { return rec.count("POST ack OK") == 2 }, 15*time.Second, 10*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, map[string]int{"a": 1, "c": 2}, calls)
	s, err := c.GetSubscription(ctx, "t", "s")
	require.NoError(t, err)
	require.Equal(t, client.QueueStats{}, s.Stats)
}

// TestWorkFerryRestarts: the Ferry behind a running loop stops and a new
// one starts on the same database (behind the same address); the loop
// backs off while none answers and then finishes every message.
func TestWorkFerryRestarts(t *testing.T) {
	t.Parallel()
	env, direct, _ := setup(t)
	proxy := newSwitchProxy(t, env.URL)
	c, _ := newClient(t, proxy.URL)
	putQueue(t, direct, "r", client.QueueConfig{VisibilityTimeoutSeconds: client.Ptr(2)})
	want := map[string]bool{}
	for i := range 20 {
		want[send(t, direct, "r", i)] = true
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	h := func(_ context.Context, m *client.Message) error {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID] = true
		return nil
	}
	log := &errorLog{}
	startWork(t, c, "r", h, client.WorkOptions{Concurrency: 2, WaitSeconds: 1, OnError: log.add})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 5 }, 15*time.Second, 5*time.Millisecond)
	env.Stop()
	require.Eventually(t, func() bool { return log.has("503") || log.has("unavailable") }, 15*time.Second, 10*time.Millisecond)
	env2 := ferrytest.StartOn(t, env.DatabaseURL)
	proxy.set(t, env2.URL)
	c2, _ := newClient(t, env2.URL)
	require.Eventually(t, func() bool { return stats(t, c2, "r") == client.QueueStats{} }, 30*time.Second, 50*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, seen, "every message was handled")
}

// ackCounter counts the receipts that ack answers acked ("ok").
type ackCounter struct{ ok atomic.Int64 }

func (a *ackCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/ack") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var res struct{ Results []client.ReceiptResult }
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	for _, r := range res.Results {
		if r.Status == "ok" {
			a.ok.Add(1)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp, nil
}

// workerProcess is the worker binary of testdata/worker running as a
// child process; lines receives its stdout.
type workerProcess struct {
	cmd   *exec.Cmd
	lines chan string
}

// startWorkerProcess builds testdata/worker and starts it on queue.
func startWorkerProcess(t *testing.T, url, queue string, handle time.Duration) *workerProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "./testdata/worker")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "FERRY_URL="+url, "FERRY_KEY="+ferrytest.AdminKey, "FERRY_QUEUE="+queue, "HANDLE="+handle.String())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	p := &workerProcess{cmd: cmd, lines: make(chan string, 1000)}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return p
}

// TestWorkKill9: a worker process killed with SIGKILL while handlers run
// loses nothing: the messages it had claimed come back, after their
// visibility timeout, to another worker, and every message is acked
// exactly once across both.
func TestWorkKill9(t *testing.T) {
	t.Parallel()
	env, c, _ := setup(t)
	putQueue(t, c, "k", client.QueueConfig{VisibilityTimeoutSeconds: client.Ptr(2)})
	const n = 12
	for i := range n {
		send(t, c, "k", i)
	}
	p := startWorkerProcess(t, env.URL, "k", 400*time.Millisecond)
	acked, running := int64(0), map[string]bool{}
	deadline := time.After(60 * time.Second)
	for acked < 3 || len(running) == 0 {
		select {
		case line, ok := <-p.lines:
			require.True(t, ok, "the worker exited early")
			var id string
			var k int64
			switch {
			case sscan(line, "start %s", &id):
				running[id] = true
			case sscan(line, "done %s", &id):
				delete(running, id)
			case sscan(line, "acked %d", &k):
				acked += k
			}
		case <-deadline:
			t.Fatal("the worker did not get going")
		}
	}
	require.NoError(t, p.cmd.Process.Signal(os.Kill))
	_ = p.cmd.Wait()
	for line := range p.lines { // what it printed before it died
		var k int64
		if sscan(line, "acked %d", &k) {
			acked += k
		}
	}
	require.Less(t, acked, int64(n))

	counter := &ackCounter{}
	c2 := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(&http.Client{Transport: counter}))
	var mu sync.Mutex
	again := map[string]int{}
	startWork(t, c2, "k", func(_ context.Context, m *client.Message) error {
		mu.Lock()
		defer mu.Unlock()
		again[m.ID] = m.ReceiveCount
		return nil
	}, client.WorkOptions{Concurrency: 2, WaitSeconds: 1})
	require.Eventually(t, func() bool { return stats(t, c, "k") == client.QueueStats{} }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, int64(n), acked+counter.ok.Load(), "every message acked exactly once across both workers")
	mu.Lock()
	defer mu.Unlock()
	for id := range running {
		require.GreaterOrEqual(t, again[id], 2, "message %s, mid-handle at the kill, came back to the second worker", id)
	}
}

// sscan reports whether line has format's shape, filling args.
func sscan(line, format string, args ...any) bool {
	n, err := fmt.Sscanf(line, format, args...)
	return err == nil && n == len(args)
}

// TestWorkBurst429: receives answered 429 (with Retry-After on the first),
// more of them than one call retries, are backed off by the call and then
// by the loop, which goes on and handles the message once.
func TestWorkBurst429(t *testing.T) {
	t.Parallel()
	env, c, _ := setup(t)
	putQueue(t, c, "busy", client.QueueConfig{})
	id := send(t, c, "busy", "x")
	many := make([]int, 7) // the call retries 4 times: the loop backs off too
	for i := range many {
		many[i] = http.StatusTooManyRequests
	}
	proxy := newBurstProxy(t, env.URL, http.MethodPost, "receive", many...)
	pc, prec := newClient(t, proxy.URL)
	got := make(chan string, 2)
	log := &errorLog{}
	start := time.Now()
	startWork(t, pc, "busy", func(_ context.Context, m *client.Message) error { got <- m.ID; return nil },
		client.WorkOptions{WaitSeconds: 1, OnError: log.add})
	select {
	case gotID := <-got:
		require.Equal(t, id, gotID)
	case <-time.After(30 * time.Second):
		t.Fatal("the loop did not get past the 429s")
	}
	require.GreaterOrEqual(t, time.Since(start), time.Second, "the first Retry-After (1 s) was honoured")
	require.True(t, log.has("burst_429"), "the loop saw a receive that failed after its retries")
	require.GreaterOrEqual(t, proxy.served.Load(), int64(len(many)+1))
	require.Eventually(t, func() bool { return prec.count("POST ack OK") == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Never(t, func() bool { return len(got) > 0 }, 300*time.Millisecond, 10*time.Millisecond)
}
