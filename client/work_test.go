package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
)

// errorLog collects what Work reports through OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err.Error())
}

func (l *errorLog) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

// startWork runs c.Work in the background until cancel (or the test's end);
// result receives its error.
func startWork(t *testing.T, c *client.Client, queue string, h client.Handler, o client.WorkOptions) (cancel context.CancelFunc, result <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- c.Work(ctx, queue, h, o); close(finished) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Error("Work did not return")
		}
	})
	return cancel, done
}

func putQueue(t *testing.T, c *client.Client, name string, cfg client.QueueConfig) {
	t.Helper()
	_, _, err := c.PutQueue(context.Background(), name, cfg)
	require.NoError(t, err)
}

func send(t *testing.T, c *client.Client, queue string, body any) string {
	t.Helper()
	s, err := c.Send(context.Background(), queue, client.SendMessage{Body: body})
	require.NoError(t, err)
	return s.ID
}

// TestWorkSlowHandlerExtended: a handler that runs for over twice the
// visibility timeout keeps its message (no other receiver of the loop gets
// it) and acks it once.
func TestWorkSlowHandlerExtended(t *testing.T) {
	t.Parallel()
	_, c, rec := setup(t)
	putQueue(t, c, "slow", client.QueueConfig{})
	id := send(t, c, "slow", "slow")
	var calls atomic.Int64
	h := func(ctx context.Context, m *client.Message) error {
		if calls.Add(1) > 1 {
			return fmt.Errorf("delivered again while handled")
		}
		select {
		case <-time.After(3500 * time.Millisecond): // the work under test: > 3 visibility timeouts
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	startWork(t, c, "slow", h, client.WorkOptions{Concurrency: 3, Visibility: time.Second, ExtendEvery: 300 * time.Millisecond, WaitSeconds: 1})
	require.Eventually(t, func() bool { return rec.count("POST ack OK") == 1 }, 15*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, calls.Load(), "message %s handled once", id)
	require.GreaterOrEqual(t, rec.count("POST extend OK"), 3)
	require.Equal(t, client.QueueStats{}, stats(t, c, "slow"))
}

// TestWorkPanicsAndPermanent: a panic is a nack whose error is the panic's
// text (dead-lettered after max_receives), a Permanent error dead-letters
// at once, and the loop goes on handling other messages.
func TestWorkPanicsAndPermanent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := setup(t)
	putQueue(t, c, "p", client.QueueConfig{MaxReceives: client.Ptr(2), RetryMinSeconds: client.Ptr(0), RetryMaxSeconds: client.Ptr(0)})
	var okCalls atomic.Int64
	h := func(ctx context.Context, m *client.Message) error {
		switch string(m.Body) {
		case `"panic"`:
			panic("boom")
		case `"permanent"`:
			return client.Permanent(errors.New("cannot parse"))
		}
		okCalls.Add(1)
		return nil
	}
	log := &errorLog{}
	startWork(t, c, "p", h, client.WorkOptions{Concurrency: 2, WaitSeconds: 1, OnError: log.add})
	send(t, c, "p", "panic")
	send(t, c, "p", "permanent")
	require.Eventually(t, func() bool { return stats(t, c, "p").DeadLetters == 2 }, 15*time.Second, 10*time.Millisecond)
	send(t, c, "p", "fine")
	require.Eventually(t, func() bool { return okCalls.Load() == 1 && stats(t, c, "p") == client.QueueStats{DeadLetters: 2} }, 15*time.Second, 10*time.Millisecond)

	dl, err := c.ListDeadLetters(ctx, "p", client.Page{})
	require.NoError(t, err)
	require.Len(t, dl.Messages, 2)
	byBody := map[string]client.DeadLetter{}
	for _, d := range dl.Messages {
		byBody[string(d.Body)] = d
	}
	require.Equal(t, "panic: boom", *byBody[`"panic"`].LastError)
	require.Equal(t, 2, byBody[`"panic"`].ReceiveCount, "a panic is a nack: retried until max_receives")
	require.Equal(t, "cannot parse", *byBody[`"permanent"`].LastError)
	require.Equal(t, 1, byBody[`"permanent"`].ReceiveCount, "a permanent error dead-letters at once")
	require.True(t, log.has("panic: boom"))
}

// TestWorkFailsThenSucceeds: a failed message is delivered again and acked
// once, after its handler succeeds.
func TestWorkFailsThenSucceeds(t *testing.T) {
	t.Parallel()
	_, c, rec := setup(t)
	putQueue(t, c, "f", client.QueueConfig{RetryMinSeconds: client.Ptr(0), RetryMaxSeconds: client.Ptr(0)})
	id := send(t, c, "f", 1)
	var counts sync.Map
	h := func(ctx context.Context, m *client.Message) error {
		counts.Store(m.ID, m.ReceiveCount)
		if m.ReceiveCount == 1 {
			return errors.New("not yet")
		}
		return nil
	}
	startWork(t, c, "f", h, client.WorkOptions{WaitSeconds: 1})
	require.Eventually(t, func() bool { return rec.count("POST ack OK") == 1 }, 15*time.Second, 10*time.Millisecond)
	n, _ := counts.Load(id)
	require.Equal(t, 2, n)
	require.Equal(t, 1, rec.count("POST nack OK"))
	require.Equal(t, client.QueueStats{}, stats(t, c, "f"))
}

// TestWorkDrain: when the context ends, a running handler finishes and its
// message is acked; one that outlasts DrainTimeout is left to its claim
// (never acked), and Work returns within the bound.
func TestWorkDrain(t *testing.T) {
	t.Parallel()
	_, c, rec := setup(t)
	putQueue(t, c, "d", client.QueueConfig{VisibilityTimeoutSeconds: client.Ptr(60)})
	send(t, c, "d", "quick")
	send(t, c, "d", "stuck")
	started := make(chan string, 2)
	release, stuck := make(chan struct{}), make(chan struct{})
	h := func(ctx context.Context, m *client.Message) error {
		started <- string(m.Body)
		if string(m.Body) == `"stuck"` {
			<-stuck // ignores ctx on purpose
			return nil
		}
		<-release
		return nil
	}
	cancel, done := startWork(t, c, "d", h, client.WorkOptions{Concurrency: 2, WaitSeconds: 1, DrainTimeout: time.Second})
	<-started
	<-started
	cancel()
	close(release)
	start := time.Now()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Work did not return after its drain bound")
	}
	require.Less(t, time.Since(start), 5*time.Second)
	close(stuck)
	require.Equal(t, 1, rec.count("POST ack OK"), "the quick message was acked while draining")
	st := stats(t, c, "d")
	require.EqualValues(t, 1, st.InFlight, "the stuck message is left to its claim")
	require.Never(t, func() bool { return rec.count("POST ack OK") > 1 }, 300*time.Millisecond, 10*time.Millisecond)
}

// TestWorkBacksOffUnavailable: receives answered 503 are backed off
// (Retry-After honoured) and the loop recovers; a queue that does not
// exist ends the loop with its error.
func TestWorkBacksOffUnavailable(t *testing.T) {
	t.Parallel()
	env, c, _ := setup(t)
	putQueue(t, c, "u", client.QueueConfig{})
	// More 503s than the client's own retries, so the loop backs off too.
	proxy := newUnavailableProxy(t, env.URL, http.MethodPost, "receive", 8)
	pc, _ := newClient(t, proxy.URL)
	send(t, c, "u", "x")
	got := make(chan string, 1)
	log := &errorLog{}
	startWork(t, pc, "u", func(ctx context.Context, m *client.Message) error { got <- m.ID; return nil },
		client.WorkOptions{WaitSeconds: 1, OnError: log.add})
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the loop did not recover")
	}
	require.GreaterOrEqual(t, proxy.served.Load(), int64(9))
	require.True(t, log.has("unavailable"))
	require.Eventually(t, func() bool { return stats(t, c, "u") == client.QueueStats{} }, 10*time.Second, 10*time.Millisecond)

	err := c.Work(context.Background(), "missing", func(context.Context, *client.Message) error { return nil }, client.WorkOptions{Visibility: time.Second})
	require.True(t, client.IsCode(err, "not_found"), "%v", err)
}
