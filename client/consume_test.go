package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// handled records, per partition, the offsets a group handler finished
// (returned nil or a permanent error) in the order it finished them, and
// how often each event was called.
type handled struct {
	mu    sync.Mutex
	order map[int][]int64
	calls map[string]int
}

func newHandled() *handled { return &handled{order: map[int][]int64{}, calls: map[string]int{}} }

// call counts a call of e and returns how many calls e had.
func (h *handled) call(e *client.Event) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls[e.ID]++
	return h.calls[e.ID]
}

func (h *handled) done(e *client.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.order[e.Partition] = append(h.order[e.Partition], e.Offset)
}

func (h *handled) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, o := range h.order {
		n += len(o)
	}
	return n
}

// startConsume runs c.Consume in the background until cancel (or the
// test's end); result receives its error.
func startConsume(t *testing.T, c *client.Client, topic, group string, h client.GroupHandler, o client.ConsumeOptions) (context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- c.Consume(ctx, topic, group, h, o); close(finished) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Error("Consume did not return")
		}
	})
	return cancel, done
}

func publishN(t *testing.T, c *client.Client, topic string, n int) {
	t.Helper()
	events := make([]client.PublishEvent, n)
	for i := range events {
		events[i] = client.PublishEvent{Type: "t", ID: fmt.Sprintf("e%d", i), Key: fmt.Sprintf("k%d", i%5), Data: i}
	}
	_, err := c.Publish(context.Background(), topic, events...)
	require.NoError(t, err)
}

// TestConsumeInOrder: a group loop handles every event once to success,
// each partition in offset order, through a handler that fails once, one
// that panics once and one that fails permanently (skipped); it commits
// everything, and on shutdown leaves the group.
func TestConsumeInOrder(t *testing.T) {
	t.Parallel()
	_, c, rec := setup(t)
	ctx := context.Background()
	_, _, err := c.PutTopic(ctx, "o", client.TopicConfig{Partitions: client.Ptr(3)})
	require.NoError(t, err)
	publishN(t, c, "o", 30)
	got, log := newHandled(), &errorLog{}
	h := func(_ context.Context, e *client.Event) error {
		n := got.call(e)
		switch {
		case e.ID == "e3" && n == 1:
			return errors.New("not yet")
		case e.ID == "e7" && n == 1:
			panic("boom")
		case e.ID == "e11":
			got.done(e)
			return client.Permanent(errors.New("poison"))
		}
		got.done(e)
		return nil
	}
	cancel, done := startConsume(t, c, "o", "g", h, client.ConsumeOptions{
		Consumer: "w1", Start: "earliest", MaxEvents: 7, WaitSeconds: 1, RetryMin: 10 * time.Millisecond, OnError: log.add,
	})
	require.Eventually(t, func() bool { return lag(t, c, "o", "g") == 0 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 30, got.total(), "every event finished once")
	for p, offs := range got.order {
		for i := 1; i < len(offs); i++ {
			require.Equal(t, offs[i-1]+1, offs[i], "partition %d in offset order: %v", p, offs)
		}
	}
	require.Equal(t, 2, got.calls["e3"])
	require.Equal(t, 2, got.calls["e7"])
	require.True(t, log.has("panic: boom"))
	require.True(t, log.has("skipped: poison"))
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	g, err := c.GetGroup(ctx, "o", "g")
	require.NoError(t, err)
	require.Empty(t, g.Members, "the loop left the group on shutdown")
	require.Equal(t, 1, rec.count("POST leave No Content"))
}

// lag is the group's total lag.
func lag(t *testing.T, c *client.Client, topic, group string) int64 {
	g, err := c.GetGroup(context.Background(), topic, group)
	if err != nil {
		return -1
	}
	n := int64(0)
	for _, p := range g.Partitions {
		n += p.Lag
	}
	return n
}

// TestConsumeFenced: a member whose partition went to another member while
// its handler ran gets its commit fenced (409) and stops that partition's
// batch: the events after it are not handled by it, and the new owner's
// progress is not overwritten.
func TestConsumeFenced(t *testing.T) {
	t.Parallel()
	_, c, _ := setup(t)
	ctx := context.Background()
	_, _, err := c.PutTopic(ctx, "f", client.TopicConfig{Partitions: client.Ptr(1)})
	require.NoError(t, err)
	publishN(t, c, "f", 3)
	inside, release := make(chan struct{}), make(chan struct{})
	got, log := newHandled(), &errorLog{}
	h := func(_ context.Context, e *client.Event) error {
		got.call(e)
		if e.Offset == 0 {
			close(inside)
			<-release
		}
		got.done(e)
		return nil
	}
	cancel, _ := startConsume(t, c, "f", "g", h, client.ConsumeOptions{
		Consumer: "a", Start: "earliest", WaitSeconds: 1, CommitEvery: time.Nanosecond, OnError: log.add,
	})
	<-inside
	require.NoError(t, c.LeaveGroup(ctx, "f", "g", "a")) // a is fenced out
	p, err := c.PollGroup(ctx, "f", "g", client.Poll{Consumer: "b", MaxEvents: 10})
	require.NoError(t, err)
	require.Len(t, p.Events, 3, "b resumes from the committed offset")
	require.NoError(t, c.CommitGroup(ctx, "f", "g", "b", p.Generation, map[int]int64{0: 2}))
	close(release)
	require.Eventually(t, func() bool { return log.has("409") || log.has("conflict") }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.Equal(t, map[int][]int64{0: {0}}, got.order, "a stopped the partition after the fenced commit")
	g, err := c.GetGroup(ctx, "f", "g")
	require.NoError(t, err)
	require.EqualValues(t, 2, g.Partitions[0].CommittedOffset)
}

// TestConsumeBursts: polls answered 429 (retried by the call) and then 503
// (backed off by the loop) are survived; after
// the 503s (an uncertain answer) the member leaves before polling again,
// so events an earlier poll took but whose answer was lost are handled,
// every event exactly once.
func TestConsumeBursts(t *testing.T) {
	t.Parallel()
	env, c, _ := setup(t)
	ctx := context.Background()
	_, _, err := c.PutTopic(ctx, "b", client.TopicConfig{Partitions: client.Ptr(2)})
	require.NoError(t, err)
	publishN(t, c, "b", 10)
	// A poll whose answer was lost: w's fetch position is past all ten.
	lost, err := c.PollGroup(ctx, "b", "g", client.Poll{Consumer: "w", Start: "earliest", MaxEvents: 10})
	require.NoError(t, err)
	require.Len(t, lost.Events, 10)
	proxy := newBurstProxy(t, env.URL, http.MethodPost, "poll",
		http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	pc, prec := newClient(t, proxy.URL)
	got, log := newHandled(), &errorLog{}
	h := func(_ context.Context, e *client.Event) error { got.call(e); got.done(e); return nil }
	startConsume(t, pc, "b", "g", h, client.ConsumeOptions{Consumer: "w", Start: "earliest", WaitSeconds: 1, OnError: log.add})
	require.Eventually(t, func() bool { return lag(t, c, "b", "g") == 0 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 10, got.total())
	for id, n := range got.calls {
		require.Equal(t, 1, n, "event %s", id)
	}
	require.True(t, log.has("burst_503"))
	require.GreaterOrEqual(t, prec.count("POST leave No Content"), 1, "left after the uncertain 503")
	require.GreaterOrEqual(t, proxy.served.Load(), int64(5))
}

// TestConsumeFerryRestarts: the Ferry behind a running group loop stops
// and a new one starts on the same database (behind the same address);
// the loop rides it out and every event is handled, the group's lag
// ending at 0.
func TestConsumeFerryRestarts(t *testing.T) {
	t.Parallel()
	env, direct, _ := setup(t)
	proxy := newSwitchProxy(t, env.URL)
	c, _ := newClient(t, proxy.URL)
	ctx := context.Background()
	_, _, err := direct.PutTopic(ctx, "rs", client.TopicConfig{Partitions: client.Ptr(2)})
	require.NoError(t, err)
	publishN(t, direct, "rs", 40)
	got, log := newHandled(), &errorLog{}
	h := func(_ context.Context, e *client.Event) error {
		time.Sleep(10 * time.Millisecond)
		got.call(e)
		got.done(e)
		return nil
	}
	startConsume(t, c, "rs", "g", h, client.ConsumeOptions{
		Consumer: "w", Start: "earliest", MaxEvents: 5, WaitSeconds: 1, SessionTimeoutSeconds: 5, OnError: log.add,
	})
	require.Eventually(t, func() bool { return got.total() >= 5 }, 15*time.Second, 5*time.Millisecond)
	env.Stop()
	require.Eventually(t, func() bool { return log.has("503") || log.has("unavailable") }, 15*time.Second, 10*time.Millisecond)
	env2 := ferrytest.StartOn(t, env.DatabaseURL)
	proxy.set(t, env2.URL)
	c2, _ := newClient(t, env2.URL)
	require.Eventually(t, func() bool { return lag(t, c2, "rs", "g") == 0 }, 45*time.Second, 50*time.Millisecond)
	got.mu.Lock()
	defer got.mu.Unlock()
	require.Len(t, got.calls, 40, "every event was handled (at least once)")
}

// TestConsumeHandover: two members share a group's partitions; when one
// shuts down it leaves, so the other takes its partitions at once (well
// before the 60 s session timeout would have evicted it) and handles
// every event published afterwards.
func TestConsumeHandover(t *testing.T) {
	t.Parallel()
	_, c, _ := setup(t)
	ctx := context.Background()
	_, _, err := c.PutTopic(ctx, "h", client.TopicConfig{Partitions: client.Ptr(4)})
	require.NoError(t, err)
	a, b := newHandled(), newHandled()
	opts := func(name string) client.ConsumeOptions {
		return client.ConsumeOptions{Consumer: name, Start: "earliest", WaitSeconds: 1, SessionTimeoutSeconds: 60}
	}
	handler := func(h *handled) client.GroupHandler {
		return func(_ context.Context, e *client.Event) error { h.call(e); h.done(e); return nil }
	}
	cancelA, doneA := startConsume(t, c, "h", "g", handler(a), opts("a"))
	startConsume(t, c, "h", "g", handler(b), opts("b"))
	require.Eventually(t, func() bool {
		g, err := c.GetGroup(ctx, "h", "g")
		return err == nil && len(g.Members) == 2 && len(g.Members[0].Partitions) == 2 && len(g.Members[1].Partitions) == 2
	}, 20*time.Second, 20*time.Millisecond, "the partitions are split between a and b")
	cancelA()
	require.ErrorIs(t, <-doneA, context.Canceled)
	start := time.Now()
	publishN(t, c, "h", 20)
	require.Eventually(t, func() bool { return b.total() == 20 }, 20*time.Second, 20*time.Millisecond, "b takes every partition")
	require.Less(t, time.Since(start), 30*time.Second)
	require.Zero(t, a.total())
	require.Eventually(t, func() bool { return lag(t, c, "h", "g") == 0 }, 10*time.Second, 20*time.Millisecond)
}
