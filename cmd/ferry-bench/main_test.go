package main

import (
	"testing"

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
	for _, bad := range []string{"group", "0", "15", "", "groups,,fanout"} {
		_, err := parseOnly(bad, all)
		require.Error(t, err, "%q", bad)
	}
	_, err = parseOnly("nope", all)
	require.ErrorContains(t, err, "1 batch-send, 2 single-send", "the error lists the scenarios")
	require.ErrorContains(t, err, "13 sql-api")
	require.ErrorContains(t, err, "14 sqs")
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
