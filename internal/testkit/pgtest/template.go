package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// builtTemplate is a database SharedTemplate built once per test binary.
type builtTemplate struct {
	once sync.Once
	name string
	err  error
}

// templates are the databases SharedTemplate built, by key; dropped with
// the shared database when the tests have run.
type templates struct {
	mu    sync.Mutex
	built map[string]*builtTemplate
}

// SharedTemplate returns the name of a database built once per test
// binary for key: a copy of the migrated template on which build ran
// (given its URL; build must close every connection it opened). Tests
// that each need the same costly starting state (a backlog, statistics
// from ANALYZE) clone it with NewDatabaseFrom instead of each building
// it. Every caller fails if build failed. Safe for parallel tests.
func SharedTemplate(t testing.TB, key string, build func(dbURL string) error) string {
	t.Helper()
	s := current.Load()
	if s == nil {
		t.Fatal("pgtest: no database server; call pgtest.Main(m) from TestMain")
	}
	s.templates.mu.Lock()
	if s.templates.built == nil {
		s.templates.built = map[string]*builtTemplate{}
	}
	b, ok := s.templates.built[key]
	if !ok {
		b = &builtTemplate{}
		s.templates.built[key] = b
	}
	s.templates.mu.Unlock()
	b.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		name := databaseName("tpl " + key)
		if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(s.template)); err != nil {
			b.err = fmt.Errorf("create database %s: %w", name, err)
			return
		}
		b.name = name
		// Until build returns: a build that ends its test (t.FailNow
		// inside it) leaves this error for every later caller.
		b.err = fmt.Errorf("build template %q did not finish", key)
		if err := build(s.url(name)); err != nil {
			b.err = fmt.Errorf("build template %q: %w", key, err)
			return
		}
		b.err = nil
	})
	if b.err != nil {
		t.Fatalf("pgtest: %v", b.err)
	}
	return b.name
}

// NewDatabaseFrom is NewDatabase with the database cloned from template
// (a name SharedTemplate returned) instead of the migrated template.
func NewDatabaseFrom(t testing.TB, template string) string {
	t.Helper()
	s := current.Load()
	if s == nil {
		t.Fatal("pgtest: no database server; call pgtest.Main(m) from TestMain")
	}
	return s.newDatabase(t, template)
}

// dropTemplates drops the databases SharedTemplate built.
func (s *server) dropTemplates() {
	s.templates.mu.Lock()
	defer s.templates.mu.Unlock()
	for _, b := range s.templates.built {
		if b.name == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := s.admin.Exec(ctx, "DROP DATABASE "+ident(b.name)+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: drop template %s: %v\n", b.name, err)
		}
		cancel()
	}
}
