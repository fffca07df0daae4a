package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// lockedBuffer is out for the test: the handlers write it at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestRunAgainstFerry runs the worker against a real Ferry: it ships the
// orders (each once), dead-letters the two bodies that are not orders, and
// with -idle returns once the queue stayed empty.
func TestRunAgainstFerry(t *testing.T) {
	env := ferrytest.Start(t)
	t.Setenv("FERRY_URL", env.URL)
	t.Setenv("FERRY_KEY", ferrytest.AdminKey)
	ctx := context.Background()
	c := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(env.Client))
	_, _, err := c.PutQueue(ctx, "orders", client.QueueConfig{})
	require.NoError(t, err)
	_, err = c.SendBatch(ctx, "orders", []client.SendMessage{
		{Body: map[string]any{"order_id": "ORD-1"}},
		{Body: map[string]any{"order_id": "ORD-2"}},
		{Body: "not an order"},
		{Body: map[string]any{}},
		{Body: map[string]any{"order_id": "ORD-3"}},
	})
	require.NoError(t, err)
	buf := &lockedBuffer{}
	out = buf
	t.Cleanup(func() { out = os.Stdout })

	start := time.Now()
	require.NoError(t, run(ctx, time.Second))
	require.Less(t, time.Since(start), 30*time.Second)
	lines := strings.Split(strings.TrimSpace(buf.b.String()), "\n")
	sort.Strings(lines)
	require.Equal(t, []string{"shipped ORD-1", "shipped ORD-2", "shipped ORD-3"}, lines)
	q, err := c.GetQueue(ctx, "orders")
	require.NoError(t, err)
	require.EqualValues(t, 2, q.Stats.DeadLetters)
	require.Zero(t, q.Stats.Available+q.Stats.InFlight)
}

// goBlockRE finds the go blocks of a Markdown file.
var goBlockRE = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestReadmeShowsThisLoop: the README's worker loop (its go block that
// calls c.Work) is a passage of this file, compared line by line
// (indentation and blank lines aside), so it compiles and runs as the
// test above runs it.
func TestReadmeShowsThisLoop(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	md, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	found := 0
	for _, b := range goBlockRE.FindAllStringSubmatch(string(md), -1) {
		if strings.Contains(b[1], "c.Work(") {
			found++
			require.Contains(t, lines(string(src)), lines(b[1]), "README.md: the worker loop is not a passage of examples/worker-go/main.go")
		}
	}
	require.Equal(t, 1, found, "README.md shows the worker loop once")
}

// lines is text with each line trimmed and blank lines left out, joined
// by newlines and ending in one.
func lines(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			b.WriteString(l + "\n")
		}
	}
	return "\n" + b.String()
}
