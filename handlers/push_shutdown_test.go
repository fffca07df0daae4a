package handlers_test

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/ferrytest"
)

// cpuTime is the CPU time (user + system) this process has used so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPushWorkerDoesNotSpinWhileStopping: once the server's Stop channel is
// closed, a push worker with a request in flight loops without blocking
// (its select has a case on the closed Stop channel) until the request
// ends. Compare the process's CPU use over the same window with a request
// in flight before and after shutdown began.
func TestPushWorkerDoesNotSpinWhileStopping(t *testing.T) {
	env := ferrytest.Start(t, allowPrivatePush)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, h hookRequest) {
		select {
		case <-release:
		case <-h.done:
		case <-time.After(20 * time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	})
	putPush(t, env, qpath("jobs"), map[string]any{"push": map[string]any{
		"url": rc.url(), "timeout_seconds": 30,
	}}, http.StatusCreated, queueKeys)
	send(t, env, "jobs", msg(map[string]any{"n": 1}))
	rc.wait(t, 1) // the request is in flight, held by the receiver

	const window = 2 * time.Second
	before := cpuTime(t)
	time.Sleep(window)
	idle := cpuTime(t) - before

	stopped := make(chan struct{})
	go func() { env.Stop(); close(stopped) }()
	time.Sleep(100 * time.Millisecond) // Stop closed, shutdown waiting for the push job
	before = cpuTime(t)
	time.Sleep(window)
	stopping := cpuTime(t) - before
	close(release)
	<-stopped

	t.Logf("CPU over %s with a push in flight: %s before shutdown, %s while stopping", window, idle, stopping)
	require.Less(t, stopping, window/4, "the push worker busy-loops while it waits for its in-flight request during shutdown")
}
