package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/pgcluster"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// DESIGN.md invariant 1: a send or publish answered 2xx is never lost,
// also through a crash of PostgreSQL. The cluster is durable (fsync on)
// and is killed with SIGQUIT (immediate shutdown: no checkpoint, recovery
// from WAL at the next start); the same Ferry server then recovers by
// itself and every acknowledged message is still there, exactly once, as
// is every acknowledged event's delivery to a subscription (invariant 8:
// the fan-out commits with the publish).
func TestAcknowledgedSendsSurvivePostgresCrash(t *testing.T) {
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "pg")
	c, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dataDir, Durable: true})
	require.NoError(t, err)
	execAdmin(t, c, "CREATE DATABASE ferry")

	env := ferrytest.StartOn(t, c.URL("ferry"))
	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/queues/durable", nil).Status)
	sent := map[string]bool{}
	for i := range 20 {
		var msgs []map[string]any
		for j := range 10 {
			msgs = append(msgs, map[string]any{"body": i*10 + j, "dedup_id": fmt.Sprintf("d-%d-%d", i, j)})
		}
		for _, id := range sendMessages(t, env, "durable", msgs) {
			sent[id] = true
		}
	}
	require.Len(t, sent, 200)

	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/topics/log", map[string]any{"partitions": 2}).Status)
	require.Equal(t, http.StatusCreated, env.Do("PUT", "/v1/topics/log/subscriptions/all", nil).Status)
	published := map[string]bool{}
	for i := range 20 {
		var evs []map[string]any
		for j := range 10 {
			evs = append(evs, map[string]any{"id": fmt.Sprintf("e-%d-%d", i, j), "type": "t"})
		}
		r := env.Do("POST", "/v1/topics/log/events", map[string]any{"events": evs})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		for _, e := range evs {
			published[e["id"].(string)] = true
		}
	}

	// Crash: SIGQUIT to the postmaster, then wait for it to be gone.
	pidFile, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGQUIT))
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 30*time.Second, 20*time.Millisecond)

	c2, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dataDir, Durable: true, Port: c.Port()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Stop(context.Background()) })

	// The server reconnects by itself: ready again, and every acknowledged
	// message and delivery is still there.
	require.Eventually(t, func() bool { return env.Do("GET", "/readyz", nil).Status == http.StatusOK },
		30*time.Second, 50*time.Millisecond)
	drain(t, env, "/v1/queues/durable", sent)
	drain(t, env, "/v1/topics/log/subscriptions/all", published)
}

// drain receives and acks from the queue (or subscription) at path until
// every id of want was acked once; an id not in want fails the test.
// (Requests that meet a pooled connection that died with the crash may
// fail; they are retried, and a message whose ack failed comes back after
// its 1 s lease.)
func drain(t *testing.T, env *ferrytest.Env, path string, want map[string]bool) {
	t.Helper()
	acked := map[string]bool{}
	require.Eventually(t, func() bool {
		r := env.Do("POST", path+"/receive", map[string]any{"max_messages": 100, "visibility_timeout_seconds": 1})
		if r.Status != http.StatusOK {
			return false
		}
		var out struct {
			Messages []struct{ ID, Receipt string } `json:"messages"`
		}
		r.JSON(t, &out)
		if len(out.Messages) == 0 {
			return len(acked) == len(want)
		}
		var receipts []string
		for _, m := range out.Messages {
			require.True(t, want[m.ID], "%s: %s was never sent", path, m.ID)
			receipts = append(receipts, m.Receipt)
		}
		a := env.Do("POST", path+"/ack", map[string]any{"receipts": receipts})
		if a.Status == http.StatusOK {
			var res struct {
				Results []struct{ Status string } `json:"results"`
			}
			a.JSON(t, &res)
			for i, m := range out.Messages {
				if res.Results[i].Status == "ok" {
					acked[m.ID] = true
				}
			}
		}
		return len(acked) == len(want)
	}, 60*time.Second, 10*time.Millisecond)
	require.Len(t, acked, len(want), "%s: every acknowledged send or publish survived the crash", path)
}
