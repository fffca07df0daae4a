package client_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// exampleServer starts a throwaway Ferry (on a fresh database of the test
// binary's PostgreSQL) for one runnable example and returns its URL, its
// admin key and the function that stops it. Your code has a Ferry of its
// own: pass its URL and an API key to client.New instead.
func exampleServer() (url, key string, stop func()) {
	tb := &exampleTB{}
	env := ferrytest.Start(tb)
	return env.URL, ferrytest.AdminKey, tb.cleanup
}

// exampleTB is the testing.TB an example hands to the test kit, which
// wants one: it keeps the cleanups for stop and reports failures on
// stderr (an example has no *testing.T of its own). The embedded TB is
// nil: a test-kit call of any other method would panic, and fail the
// example.
type exampleTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

func (e *exampleTB) Helper()      {}
func (e *exampleTB) Name() string { return "Examples" }
func (e *exampleTB) Failed() bool { e.mu.Lock(); defer e.mu.Unlock(); return e.failed }

func (e *exampleTB) Cleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

func (e *exampleTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (e *exampleTB) Log(args ...any)                 { fmt.Fprintln(os.Stderr, args...) }

func (e *exampleTB) Errorf(format string, args ...any) {
	e.mu.Lock()
	e.failed = true
	e.mu.Unlock()
	e.Logf(format, args...)
}

func (e *exampleTB) Error(args ...any)                 { e.Errorf("%s", fmt.Sprint(args...)) }
func (e *exampleTB) Fatalf(format string, args ...any) { e.Errorf(format, args...); e.FailNow() }
func (e *exampleTB) Fatal(args ...any)                 { e.Error(args...); e.FailNow() }
func (e *exampleTB) FailNow()                          { panic("example server: failed") }

// cleanup runs the cleanups, last first.
func (e *exampleTB) cleanup() {
	e.mu.Lock()
	fs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
