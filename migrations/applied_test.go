package migrations_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A migration that has landed must never change: a database migrated by
// an older build has run the old text, and golang-migrate will not run it
// again, so an edit leaves that database with a different schema from a
// new one. applied.sha256 lists every landed migration with its hash; a
// new migration is added to it (sha256sum NNNNNN_*.sql >> applied.sha256)
// in the change that adds the file, and a changed one fails here.
func TestLandedMigrationsNeverChange(t *testing.T) {
	t.Parallel()
	f, err := os.Open("applied.sha256")
	require.NoError(t, err)
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(t, fields, 2, "applied.sha256: %q", sc.Text())
		want, name := fields[0], fields[1]
		raw, err := os.ReadFile(name)
		require.NoError(t, err, "%s is listed as landed but is gone", name)
		sum := sha256.Sum256(raw)
		require.Equal(t, want, hex.EncodeToString(sum[:]),
			"%s changed after it landed: add a new migration instead of editing it", name)
		listed[name] = true
	}
	require.NoError(t, sc.Err())
	files, err := filepath.Glob("*.sql")
	require.NoError(t, err)
	for _, name := range files {
		require.True(t, listed[name], "%s is not in applied.sha256: add it (sha256sum %s >> migrations/applied.sha256)", name, name)
	}
}
