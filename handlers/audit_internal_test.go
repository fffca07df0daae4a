package handlers

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/metrics"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// hotRoutes are the routes that change something but are not audited:
// the hot paths (API.md § Access control lists what is audited).
var hotRoutes = []string{
	"POST /v1/queues/:queue/messages",
	"POST /v1/topics/:topic/events",
	"POST /v1/topics/:topic/groups/:group/poll",
	"POST /v1/topics/:topic/groups/:group/commit",
	"POST /v1/topics/:topic/groups/:group/leave",
}

// Every /v1 route that may change something (PUT, POST, DELETE) is either
// audited or a hot path, reads are not audited but of dead letters, which
// are, and every audited route is a route of the router
// (the key routes once they are registered), whose rule names the kind of
// resource the entry names.
func TestEveryChangeIsAudited(t *testing.T) {
	t.Parallel()
	audited, rules := auditedRoutes(), routeRules()
	seen := map[string]bool{}
	keyRoutes := false
	for _, r := range routerForTest().Routes() {
		if !strings.HasPrefix(r.Path, "/v1/") {
			continue
		}
		k := r.Method + " " + r.Path
		seen[k] = true
		keyRoutes = keyRoutes || strings.HasPrefix(r.Path, "/v1/keys")
		if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/dead-letters") {
			require.Contains(t, audited, k, "reads of dead letters are audited: they show bodies no consumer received")
			continue
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			require.NotContains(t, audited, k, "other reads are not audited")
			continue
		}
		hot := false
		for _, base := range []string{"/v1/queues/:queue", "/v1/topics/:topic/subscriptions/:sub"} {
			for _, a := range []string{"/receive", "/ack", "/nack", "/extend"} {
				hot = hot || k == "POST "+base+a
			}
		}
		hot = hot || strings.Contains(strings.Join(hotRoutes, "\n"), k)
		_, isAudited := audited[k]
		require.True(t, hot != isAudited, "%s must be audited (auditedRoutes) or a hot path, not both nor neither", k)
	}
	for k, a := range audited {
		if strings.HasPrefix(k, "POST /v1/keys") || strings.HasPrefix(k, "DELETE /v1/keys") {
			if !keyRoutes {
				continue // the key routes are not registered yet
			}
			require.Equal(t, access.Admin, rules[k].kind, k)
		}
		require.True(t, seen[k], "auditedRoutes has %q, which no route of the router has", k)
		require.Regexp(t, `^[a-z_]+\.[a-z_]+$`, a.action, k)
	}
}

// auditServer is the authorize middleware in front of handlers of a
// test's own, on a database of its own, logging to a buffer.
type auditServer struct {
	e    *echo.Echo
	h    *handler
	pool *pgxpool.Pool
	mu   sync.Mutex
	log  bytes.Buffer
}

func (s *auditServer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Write(p)
}

func newAuditServer(t *testing.T) *auditServer {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := &auditServer{e: echo.New(), pool: pool}
	log := slog.New(slog.NewTextHandler(s, nil))
	s.h = &handler{Deps: Deps{Pool: pool, Log: log, Metrics: metrics.New(pool, log, 0)},
		resolver: access.Chain(access.NewAdminKey("audit-test-admin-key"), auditKeys{}), rules: routeRules()}
	s.e.HTTPErrorHandler = errorHandler(log)
	s.e.Use(s.h.requestID, s.h.recover, s.h.observe)
	return s
}

// auditKeys resolves "scoped" to a key of the key store's id form.
type auditKeys struct{}

func (auditKeys) Resolve(_ context.Context, secret string) (access.Key, error) {
	if secret != "scoped" {
		return access.Key{}, access.ErrInvalidKey
	}
	return access.Key{ID: store.FormatKeyID(42), Name: "ci-deployer", Grants: []access.Grant{{Kind: access.Admin}}}, nil
}

// route registers fn at method and path behind authorize.
func (s *auditServer) route(method, path string, fn echo.HandlerFunc) {
	s.e.Add(method, path, fn, s.h.authorize(method, path))
}

func (s *auditServer) do(method, path, secret string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	s.e.ServeHTTP(rec, req)
	return rec
}

func (s *auditServer) entries(t *testing.T) []store.AuditEntry {
	t.Helper()
	es, _, err := store.AuditList(context.Background(), s.pool, store.AuditPageParams{Limit: 100})
	require.NoError(t, err)
	return es
}

// A key's creation is recorded with the id its 201 answer names, a
// refused one with "key:"; a deletion with the id of its path; a scoped
// key with its id, the admin key with none.
func TestAuditKeyRoutes(t *testing.T) {
	t.Parallel()
	s := newAuditServer(t)
	s.h.rules["POST /v1/keys"] = rule{kind: access.Admin, action: access.All}
	s.h.rules["DELETE /v1/keys/:id"] = rule{kind: access.Admin, action: access.All}
	fail := false
	s.route(http.MethodPost, "/v1/keys", func(c echo.Context) error {
		if fail {
			return invalid("name", "is required")
		}
		return reply(c, http.StatusCreated, map[string]any{"id": "key_9", "key": store.NewKeySecret(), "name": "x"})
	})
	s.route(http.MethodDelete, "/v1/keys/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })

	rec := s.do(http.MethodPost, "/v1/keys", "audit-test-admin-key")
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Contains(t, rec.Body.String(), `"id":"key_9"`, "the answer passes through whole")
	fail = true
	require.Equal(t, http.StatusBadRequest, s.do(http.MethodPost, "/v1/keys", "scoped").Code)
	require.Equal(t, http.StatusNoContent, s.do(http.MethodDelete, "/v1/keys/key_9", "scoped").Code)

	got := s.entries(t)
	require.Len(t, got, 3)
	id := int64(42)
	for i, want := range []store.AuditEntry{
		{KeyID: &id, KeyName: "ci-deployer", Action: "key.delete", Resource: "key:key_9", Status: 204},
		{KeyID: &id, KeyName: "ci-deployer", Action: "key.create", Resource: "key:", Status: 400},
		{KeyName: "FERRY_ADMIN_KEY", Action: "key.create", Resource: "key:key_9", Status: 201},
	} {
		require.NotEmpty(t, got[i].RequestID)
		want.ID, want.At, want.RequestID = got[i].ID, got[i].At, got[i].RequestID
		require.Equal(t, want, got[i])
	}
}

// A handler that panics is recorded as the 500 it is answered with.
func TestAuditPanic(t *testing.T) {
	t.Parallel()
	s := newAuditServer(t)
	s.route(http.MethodDelete, "/v1/queues/:queue", func(echo.Context) error { panic("boom") })
	require.Equal(t, http.StatusInternalServerError, s.do(http.MethodDelete, "/v1/queues/q1", "audit-test-admin-key").Code)
	got := s.entries(t)
	require.Len(t, got, 1)
	require.Equal(t, []any{"queue.delete", "queue:q1", 500}, []any{got[0].Action, got[0].Resource, got[0].Status})
}

// When the audit log cannot be written, the answer is the same as when it
// can; the failure is logged as an ERROR with the request id and counted
// in ferry_audit_write_errors_total.
func TestAuditWriteFailure(t *testing.T) {
	t.Parallel()
	s := newAuditServer(t)
	s.route(http.MethodPut, "/v1/queues/:queue", func(c echo.Context) error {
		return reply(c, http.StatusCreated, map[string]string{"name": c.Param("queue")})
	})
	s.route(http.MethodDelete, "/v1/queues/:queue", func(echo.Context) error {
		return problem(http.StatusNotFound, codeNotFound, "no such queue")
	})
	ok := s.do(http.MethodPut, "/v1/queues/q1", "audit-test-admin-key")
	okMissing := s.do(http.MethodDelete, "/v1/queues/q1", "audit-test-admin-key")
	require.Len(t, s.entries(t), 2)
	require.Zero(t, auditErrors(t, s.h.Metrics))

	_, err := s.pool.Exec(context.Background(), `
		CREATE FUNCTION audit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$;
		CREATE TRIGGER audit_refuse BEFORE INSERT ON ferry.audit_log FOR EACH ROW EXECUTE FUNCTION audit_refuse()`)
	require.NoError(t, err)
	failed := s.do(http.MethodPut, "/v1/queues/q1", "audit-test-admin-key")
	failedMissing := s.do(http.MethodDelete, "/v1/queues/q1", "audit-test-admin-key")
	for _, pair := range [][2]*httptest.ResponseRecorder{{ok, failed}, {okMissing, failedMissing}} {
		require.Equal(t, pair[0].Code, pair[1].Code)
		require.Equal(t, pair[0].Header().Get("Content-Type"), pair[1].Header().Get("Content-Type"))
		want := strings.ReplaceAll(pair[0].Body.String(), pair[0].Header().Get(headerRequestID), "RID")
		require.Equal(t, want, strings.ReplaceAll(pair[1].Body.String(), pair[1].Header().Get(headerRequestID), "RID"))
	}
	require.Len(t, s.entries(t), 2, "nothing was written")
	require.InDelta(t, 2, auditErrors(t, s.h.Metrics), 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	logged := s.log.String()
	require.Contains(t, logged, "level=ERROR msg=\"audit log write failed\"")
	require.Contains(t, logged, "request_id="+failedMissing.Header().Get(headerRequestID))
	require.Contains(t, logged, "audit refused")
}

// auditErrors reads ferry_audit_write_errors_total from a scrape of m.
func auditErrors(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ferry_audit_write_errors_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return n
		}
	}
	require.Fail(t, "no ferry_audit_write_errors_total in the scrape")
	return 0
}
