// Package definitions holds the text of every function of the ferry
// schema: the claim engine, the send statements, the SQL API and their
// helpers, one .sql file per concept, and installs it after the numbered
// migrations (migrations.Up calls [Install]). store/doc.go, section
// "# Definitions", says what a generation is and which definitions a
// rolling deploy may change.
package definitions

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Generation numbers the definitions this binary carries. It goes up by
// one with every change to a .sql file here (TestGenerationBumped holds
// generations.sha256 to it), so that a database records which a binary
// installed and an older binary never installs over a newer one.
const Generation = 14

//go:embed *.sql
var files embed.FS

// Files returns the embedded definition files.
func Files() fs.FS { return files }

// names returns the files in install order (by name).
func names() ([]string, error) {
	ents, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out, nil
}

// Checksum is the SHA-256 (hex) of the files, names and contents, in
// install order.
func Checksum() string {
	h := sha256.New()
	ns, err := names()
	if err != nil {
		panic(err) // an embedded directory always reads
	}
	for _, n := range ns {
		b, err := fs.ReadFile(files, n)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Install runs the files in tx, in name order, unless the database holds
// a newer generation, or this one with the same checksum, and records
// [Generation] and [Checksum]; it reports whether it installed. The
// caller holds the migration lock, and the schema is migrated to at least
// 000012 (table ferry.definitions).
func Install(ctx context.Context, tx pgx.Tx) (bool, error) {
	return install(ctx, tx, Generation, Checksum())
}

// install is [Install] of the given generation and checksum (tests
// install as older and newer binaries).
func install(ctx context.Context, tx pgx.Tx, gen int, sum string) (bool, error) {
	var have int
	var haveSum string
	err := tx.QueryRow(ctx, `SELECT generation, checksum FROM ferry.definitions FOR UPDATE`).Scan(&have, &haveSum)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, fmt.Errorf("read installed definitions: %w", err)
	case have > gen || (have == gen && haveSum == sum):
		return false, nil
	}
	ns, err := names()
	if err != nil {
		return false, err
	}
	for _, n := range ns {
		b, err := fs.ReadFile(files, n)
		if err != nil {
			return false, err
		}
		// No arguments: the simple protocol, several statements at once.
		if _, err := tx.Exec(ctx, string(b)); err != nil {
			return false, fmt.Errorf("install definitions %s: %w", n, err)
		}
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO ferry.definitions (generation, checksum) VALUES ($1, $2)
		ON CONFLICT (one) DO UPDATE SET generation = excluded.generation, checksum = excluded.checksum,
			installed_at = excluded.installed_at`, gen, sum)
	if err != nil {
		return false, fmt.Errorf("record definitions: %w", err)
	}
	return true, nil
}
