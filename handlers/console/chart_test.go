package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestConsoleCharts proves the charts: traffic through REST is sampled
// into the history, and the queue and group pages draw it as SVG.
func TestConsoleCharts(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.SampleEvery = 50 * time.Millisecond })
	rest(t, env, "PUT", "/v1/queues/busy", nil, http.StatusCreated)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	require.Contains(t, u.get("/ui/queues/busy").Body, "no traffic in the last hour")

	deadLetterAll(t, env, "busy", "bad", 1, 2)
	rest(t, env, "PUT", "/v1/topics/tp", nil, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/groups/g/poll", map[string]any{"consumer": "c1"}, http.StatusOK)
	ferrytest.WaitFor(t, 10*time.Second, "the queue's chart", func() bool {
		p := u.get("/ui/queues/busy")
		return strings.Contains(p.Body, `id="charts"`) && !strings.Contains(p.Body, "no traffic") && strings.Contains(p.Body, `<polyline points="`)
	})
	p := u.get("/ui/queues/busy")
	require.Contains(t, p.Body, "dead letters")
	require.Contains(t, p.Body, "<svg")
	ferrytest.WaitFor(t, 10*time.Second, "the group's chart", func() bool {
		return !strings.Contains(u.get("/ui/topics/tp/groups/g").Body, "no traffic")
	})
}
