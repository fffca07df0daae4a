package handlers

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serveProblems serves h on a loopback listener wrapped by ProblemListener,
// with small header limits, and returns its address.
func serveProblems(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h, MaxHeaderBytes: 1 << 10, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ProblemListener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// exchange sends one raw request and reads the answer.
func exchange(t *testing.T, addr, raw string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// TestProblemListenerRewritesPlainErrors: the answers net/http writes by
// itself before any handler runs (a bad %-escape, a missing Host, headers
// too large) reach the client as problems with the same status; a
// handler's own answer, even a plain-text one, passes untouched.
func TestProblemListenerRewritesPlainErrors(t *testing.T) {
	t.Parallel()
	addr := serveProblems(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "the handler's own words")
	}))
	for _, tc := range []struct {
		name, raw    string
		status       int
		code, detail string
	}{
		{"bad escape", "GET /v1/queues/%zz HTTP/1.1\r\nHost: ferry\r\n\r\n", 400, codeInvalid, "could not be parsed"},
		{"no host", "GET /healthz HTTP/1.1\r\n\r\n", 400, codeInvalid, "missing required Host header"},
		{"huge header", "GET /healthz HTTP/1.1\r\nHost: ferry\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431, codeTooLarge, "headers are too large"},
	} {
		resp, body := exchange(t, addr, tc.raw)
		require.Equal(t, tc.status, resp.StatusCode, tc.name)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), tc.name)
		var p Problem
		require.NoError(t, json.Unmarshal(body, &p), "%s: %s", tc.name, body)
		require.Equal(t, tc.status, p.Status, tc.name)
		require.Equal(t, tc.code, p.Code, tc.name)
		require.Contains(t, p.Detail, tc.detail, tc.name)
	}
	resp, body := exchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: ferry\r\n\r\n")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "the handler's own words", string(body))
}

// TestPlainErrorAsProblemShapes: only net/http's exact error shape is
// rewritten; anything else, or a status outside 4xx and 5xx, is not.
func TestPlainErrorAsProblemShapes(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"HTTP/1.1 200 OK" + plainErrorHeaders + "fine",
		"HTTP/1.1 400 Bad Request\r\nX-Request-Id: r\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nno",
		"HTTP/1.0 400 Bad Request" + plainErrorHeaders + "400 Bad Request",
		"HTTP/1.1 4x0 Bad" + plainErrorHeaders + "x",
		"400 Bad Request: body bytes of some answer",
	} {
		_, ok := plainErrorAsProblem([]byte(p))
		require.False(t, ok, "%q", p)
	}
	q, ok := plainErrorAsProblem([]byte("HTTP/1.1 505 HTTP Version Not Supported" + plainErrorHeaders + "unsupported protocol version"))
	require.True(t, ok)
	require.Contains(t, string(q), "HTTP/1.1 505 HTTP Version Not Supported\r\n")
	require.Contains(t, string(q), "the request could not be handled: unsupported protocol version")
}
