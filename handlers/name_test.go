package handlers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

func TestBadQueueNames(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "ok", nil)
	cases := badNameCases(qpath, "q✓",
		nameRoute{"send", "POST", "/messages", `{"messages":[{"body":1}]}`},
		nameRoute{"receive", "POST", "/receive", `{}`})
	runBadCases(t, env, cases)
	require.Len(t, snapshot(t, env), 1)
}
