package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestConsoleOverviewTenThousandQueues proves the overview with 10,000
// queues (and a scoped key that may read only the last few): a page, the
// next page, a search and the scoped key's page all answer with what they
// should. The times are logged, not asserted (the machine's load decides
// them); see docs/console.md for what a page reads.
func TestConsoleOverviewTenThousandQueues(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	_, err := env.Server.Pool().Exec(context.Background(),
		`INSERT INTO ferry.queues (name) SELECT 'load-' || lpad(g::text, 5, '0') FROM generate_series(1, 10000) g`)
	require.NoError(t, err)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	_, secret := newKey(t, env, "queue:load-0999*", "read")
	s := newUI(t, env)
	s.signIn(secret)
	for _, c := range []struct {
		ui         *ui
		path, want string
		rows       int
	}{
		{u, "/ui/", "load-00050", 50},
		{u, "/ui/?after=load-09000", "load-09050", 50},
		{u, "/ui/?q=9876", "load-09876", 1},
		{s, "/ui/", "load-09999", 10},
	} {
		start := time.Now()
		p := c.ui.get(c.path)
		took := time.Since(start)
		require.Equal(t, http.StatusOK, p.Status)
		require.Contains(t, p.Body, c.want, c.path)
		require.Equal(t, c.rows, strings.Count(p.Body[strings.Index(p.Body, `id="queues"`):], `<a href="/ui/queues/`), c.path)
		t.Logf("%s: %v", c.path, took)
	}
}
