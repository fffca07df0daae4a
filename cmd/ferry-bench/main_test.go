package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOnlyTakesNamesAndNumbers(t *testing.T) {
	t.Parallel()
	all := scenarios()
	got, err := parseOnly("groups, fanout,2", all)
	require.NoError(t, err)
	require.Equal(t, map[int]bool{10: true, 9: true, 2: true}, got)
	for i, sc := range all {
		one, err := parseOnly(sc.name, all)
		require.NoError(t, err)
		require.Equal(t, map[int]bool{i + 1: true}, one, "%s is scenario %d", sc.name, i+1)
	}
	for _, bad := range []string{"group", "0", "17", "", "groups,,fanout"} {
		_, err := parseOnly(bad, all)
		require.Error(t, err, "%q", bad)
	}
	_, err = parseOnly("nope", all)
	require.ErrorContains(t, err, "1 batch-send, 2 single-send", "the error lists the scenarios")
	require.ErrorContains(t, err, "13 sql-api")
	require.ErrorContains(t, err, "14 sqs")
	require.ErrorContains(t, err, "15 held-snapshot (opt-in), 16 river")
}

func TestScenarioNamesAreUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, sc := range scenarios() {
		require.NotEmpty(t, sc.name)
		require.NotEmpty(t, sc.title)
		require.NotNil(t, sc.run)
		require.False(t, seen[sc.name], "%s twice", sc.name)
		seen[sc.name] = true
	}
}

func TestHeldSnapshotRunsOnlyWhenNamed(t *testing.T) {
	t.Parallel()
	all := scenarios()
	n := slices.IndexFunc(all, func(sc scenario) bool { return sc.name == "held-snapshot" }) + 1
	require.Positive(t, n)
	require.False(t, chosen(nil, n, all[n-1]), "a full run leaves it out")
	require.True(t, chosen(nil, 1, all[0]), "a full run runs the others")
	only, err := parseOnly("held-snapshot", all)
	require.NoError(t, err)
	require.True(t, chosen(only, n, all[n-1]))
	require.False(t, chosen(only, 1, all[0]))
	require.Contains(t, scenarioNames(all), fmt.Sprintf("%d held-snapshot (opt-in)", n))
	r := slices.IndexFunc(all, func(sc scenario) bool { return sc.name == "river" }) + 1
	require.Equal(t, 16, r, "the River peer comes after held-snapshot, so the numbers before stay")
	require.True(t, chosen(nil, r, all[r-1]), "a full run runs the River peer")
}

func TestHeldFlowsTakesKnownNames(t *testing.T) {
	t.Parallel()
	got, err := parseHeldFlows("queue, group")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"queue": true, "group": true}, got)
	_, err = parseHeldFlows("queue,topic")
	require.ErrorContains(t, err, `"topic" is not one of queue, subscription, group`)
}

func TestHeldWindowsAreAMinuteInLongRuns(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Minute, heldWindowOf(10*time.Minute))
	require.Equal(t, 30*time.Second, heldWindowOf(3*time.Minute))
	require.Equal(t, 10*time.Second, heldWindowOf(30*time.Second))
}
