package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The lab, with every fault injected, ends with each consumer having done
// exactly what the committed orders asked: every order charged once, one
// email per order, created before shipped for every order, every event
// counted; nothing of a rolled-back order seen anywhere.
func TestOrderCreatedLab(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.AllowPrivatePush = true })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	lab, err := newLab(ctx, Config{URL: env.URL, Key: ferrytest.AdminKey, DatabaseURL: env.DatabaseURL, Orders: 40, Faults: true})
	require.NoError(t, err)
	defer lab.Close()
	rep, err := lab.Run(ctx)
	require.NoError(t, err)
	t.Log(rep)
	require.True(t, rep.OK(), "%s", rep)

	// The faults happened: the run proved something.
	o, p, e, inv, a := lab.orders, lab.payment, lab.email, lab.inventory, lab.analytics
	require.Equal(t, 5, len(o.rolledBack))
	require.Equal(t, 35, len(o.committed))
	require.Equal(t, 7, o.retried)
	require.Equal(t, o.retried, o.duplicates)
	require.Positive(t, p.crashes)
	// The poison order was received max_receives times before its dead
	// letter; a crash may have taken some of its nacks with it.
	require.True(t, p.nacked >= 1 && p.nacked <= 3, "poison nacks: %d", p.nacked)
	require.Equal(t, 1, p.redriven)
	require.Zero(t, p.conflicts, "no charge was written twice: exactly once")
	require.Positive(t, e.failed)
	require.Positive(t, inv.nacked)
	require.Equal(t, 1, a.handovers)
	require.Zero(t, lab.leaks(ctx))
}

// Without a Ferry to run against, the lab says which variables to set and
// connects to nothing.
func TestRunNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), Config{Key: "k"})
	require.EqualError(t, err, "FERRY_URL is not set (`ferry dev` prints it)\n"+
		"DATABASE_URL is not set (`ferry dev` prints it)")
}
