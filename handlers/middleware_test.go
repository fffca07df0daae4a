//go:build unix

package handlers_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// requestsServed sums ferry_http_request_duration_seconds_count of the
// route and method: the requests whose handlers have returned.
func requestsServed(t *testing.T, env *ferrytest.Env, method, route string) float64 {
	t.Helper()
	samples, _ := metrics(t, env)
	var n float64
	for series, v := range samples {
		if strings.HasPrefix(series, "ferry_http_request_duration_seconds_count{") &&
			strings.Contains(series, `method="`+method+`"`) && strings.Contains(series, `route="`+route+`"`) {
			n += v
		}
	}
	return n
}

// smallBufferDialer dials with a 4 KiB receive buffer.
func smallBufferDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
}

// An answer must be written within FERRY_WRITE_TIMEOUT of its start
// (issue 18 item 7): a client that never reads a 9 MB page has its
// connection closed within the bound, while a client that reads gets the
// same page whole, and long polls that wait 20 s (ten times the bound)
// before they answer are not cut.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const bound = 2 * time.Second
	bounded := func(c *server.Config) { c.WriteTimeout = bound }

	// Long polls, on a server of their own (their routes' counts stay
	// apart from the page's): a receive, an event read and a group poll.
	polls := ferrytest.Start(t, bounded)
	putQueue(t, polls, "quiet", nil)
	putTopic(t, polls, "quiet", map[string]any{"partitions": 1}, http.StatusCreated)
	var wg sync.WaitGroup
	results := make([]asyncResult, 3)
	for i, poll := range []func() asyncResult{
		func() asyncResult {
			return doAsync(polls, "POST", qpath("quiet", "/receive"), map[string]any{"wait_seconds": 20})
		},
		func() asyncResult { return getAsync(polls, tpath("quiet", "/events?partition=0&wait_seconds=20")) },
		func() asyncResult {
			return doAsync(polls, "POST", tpath("quiet", "/groups/g/poll"), map[string]any{"consumer": "w", "wait_seconds": 20})
		},
	} {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = poll() }()
	}

	// A page of about 9 MB: 40 events of 220 KB.
	env := ferrytest.Start(t, bounded)
	putTopic(t, env, "big", map[string]any{"partitions": 1}, http.StatusCreated)
	events := make([]map[string]any, 40)
	for i := range events {
		events[i] = map[string]any{"type": "big", "data": strings.Repeat("x", 220_000)}
	}
	publishEvents(t, env, "big", events...)
	const route, path = "/v1/topics/:topic/events", "/v1/topics/big/events?partition=0&limit=40"
	page := env.Do("GET", path, nil)
	require.Equal(t, http.StatusOK, page.Status)
	require.Greater(t, len(page.Body), 8_000_000, "a client that reads gets the whole page")
	require.Equal(t, 1.0, requestsServed(t, env, "GET", route))

	// A client that never reads: its receive buffer is small (from
	// before it connects, so that the window it offers is too), and the
	// server's writes stall once the kernel's buffers are full.
	conn, err := smallBufferDialer().Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: ferry\r\nAuthorization: Bearer %s\r\n\r\n", path, ferrytest.AdminKey)
	require.NoError(t, err)
	ferrytest.WaitFor(t, bound+10*time.Second, "the server to give up writing to a client that does not read", func() bool {
		return requestsServed(t, env, "GET", route) == 2
	})
	require.GreaterOrEqual(t, time.Since(start), bound-100*time.Millisecond, "the write was given its bound")
	// The connection is closed: reading it now gets what the kernel had
	// buffered for it, then its end, short of the page.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.Copy(io.Discard, conn)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection was closed (read %d bytes)", got)
	require.Less(t, got, int64(len(page.Body)), "the page was cut")

	wg.Wait()
	for i, r := range results {
		require.NoError(t, r.err, "long poll %d", i)
		require.Equal(t, http.StatusOK, r.status, "long poll %d: %s", i, r.body)
		require.GreaterOrEqual(t, r.took, 20*time.Second-100*time.Millisecond, "long poll %d waited its wait_seconds", i)
	}
}
