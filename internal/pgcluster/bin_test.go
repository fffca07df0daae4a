package pgcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindBinDir(t *testing.T) {
	t.Parallel()

	// fakeServer makes dir look like a PostgreSQL bin directory.
	fakeServer := func(t *testing.T, dir string) string {
		t.Helper()
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755))
		}
		return dir
	}

	t.Run("PgConfig", func(t *testing.T) {
		t.Parallel()
		bin := fakeServer(t, filepath.Join(t.TempDir(), "bin"))
		path := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(path, "pg_config"), []byte("#!/bin/sh\necho "+bin+"\n"), 0o755))
		root := t.TempDir()
		fakeServer(t, filepath.Join(root, "17", "bin"))

		dir, err := findBinDir(path, root)
		require.NoError(t, err)
		require.Equal(t, bin, dir, "pg_config wins over the versioned directories")
	})

	t.Run("PgConfigWithoutServer", func(t *testing.T) {
		t.Parallel()
		path := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(path, "pg_config"), []byte("#!/bin/sh\necho /nonexistent\n"), 0o755))
		root := t.TempDir()
		want := fakeServer(t, filepath.Join(root, "15", "bin"))

		dir, err := findBinDir(path, root)
		require.NoError(t, err)
		require.Equal(t, want, dir)
	})

	t.Run("NewestVersion", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		fakeServer(t, filepath.Join(root, "9.6", "bin"))
		fakeServer(t, filepath.Join(root, "14", "bin"))
		want := fakeServer(t, filepath.Join(root, "16", "bin"))
		require.NoError(t, os.MkdirAll(filepath.Join(root, "18", "bin"), 0o755)) // client only
		require.NoError(t, os.MkdirAll(filepath.Join(root, "common"), 0o755))

		dir, err := findBinDir("", root)
		require.NoError(t, err)
		require.Equal(t, want, dir)
	})

	t.Run("Path", func(t *testing.T) {
		t.Parallel()
		want := fakeServer(t, t.TempDir())

		dir, err := findBinDir(t.TempDir()+string(os.PathListSeparator)+want, t.TempDir())
		require.NoError(t, err)
		require.Equal(t, want, dir)
	})

	t.Run("PathSymlink", func(t *testing.T) {
		t.Parallel()
		want := fakeServer(t, t.TempDir())
		path := t.TempDir()
		require.NoError(t, os.Symlink(filepath.Join(want, "initdb"), filepath.Join(path, "initdb")))

		dir, err := findBinDir(path, t.TempDir())
		require.NoError(t, err)
		require.Equal(t, want, dir, "initdb on PATH is followed to the directory with postgres")
	})

	t.Run("NotInstalled", func(t *testing.T) {
		t.Parallel()
		_, err := findBinDir(t.TempDir(), t.TempDir())
		require.ErrorIs(t, err, ErrNotInstalled)
		require.ErrorContains(t, err, "apt-get install -y postgresql")
		require.ErrorContains(t, err, "brew install postgresql")
	})
}
