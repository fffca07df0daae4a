//go:build !linux

package pgtest

import "os"

// clusterBaseDir is where a private cluster's temporary directory goes.
func clusterBaseDir() string { return os.TempDir() }
