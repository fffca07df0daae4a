package pgcluster

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShellQuote(t *testing.T) {
	t.Parallel()

	require.Equal(t, `'a b'`, shellQuote("a b"))
	require.Equal(t, `'it'\''s'`, shellQuote("it's"))
}
