package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
)

// Deps is what the console needs.
type Deps struct {
	// API is the REST face, which the console calls in-process.
	API http.Handler
	// Resolver resolves the key given at sign-in, as REST resolves a
	// Bearer secret.
	Resolver access.Resolver
	// KeyByID answers the key of a session's id: access.ErrInvalidKey
	// when it is gone (revoked) or expired.
	KeyByID func(ctx context.Context, id string) (access.Key, error)
	// Secret MACs session cookies and CSRF tokens (DeriveSecret).
	Secret []byte
	// Pool serves the overview's search and attention list.
	Pool *pgxpool.Pool
	Log  *slog.Logger
	// PublicURL is the base URL browsers reach Ferry at
	// (FERRY_PUBLIC_URL; "": each request's own). When it is https the
	// session cookie is Secure even over the plain HTTP a TLS-ending
	// proxy forwards, and forms from its origin are the console's own.
	PublicURL string
}

// Console serves /ui/.
type Console struct {
	api      http.Handler
	resolver access.Resolver
	keyByID  func(ctx context.Context, id string) (access.Key, error)
	secret   []byte
	pool     *pgxpool.Pool
	log      *slog.Logger
	pages    *pages
	// public is Deps.PublicURL parsed (zero when unset).
	public url.URL
}

// Mount registers the console's routes on e, under /ui.
func Mount(e *echo.Echo, d Deps) {
	c := &Console{api: d.API, resolver: d.Resolver, keyByID: d.KeyByID, secret: d.Secret, pool: d.Pool, log: d.Log, pages: loadPages()}
	if u, err := url.Parse(d.PublicURL); err == nil && d.PublicURL != "" {
		c.public = *u
	}
	g := e.Group("/ui", c.secure)
	g.GET("", func(ec echo.Context) error { return ec.Redirect(http.StatusSeeOther, "/ui/") })
	g.GET("/static/*", c.static)
	g.GET("/login", c.loginPage)
	g.POST("/login", c.login)
	g.POST("/logout", c.signedIn(c.logout))
	g.GET("/", c.signedIn(c.overview))
	c.targetRoutes(g, "/queues/:queue")
	c.targetRoutes(g, "/topics/:topic/subscriptions/:sub")
	g.GET("/topics/:topic", c.signedIn(c.topicPage))
	g.GET("/topics/:topic/groups/:group", c.signedIn(c.groupPage))
	g.POST("/topics/:topic/groups/:group/seek", c.signedIn(c.changes(c.groupSeek)))
	g.GET("/keys", c.signedIn(c.keysPage))
	g.POST("/keys", c.signedIn(c.changes(c.keyCreate)))
	g.POST("/keys/:id/revoke", c.signedIn(c.changes(c.keyRevoke)))
	g.GET("/audit", c.signedIn(c.auditPage))
	g.Any("/*", c.signedIn(func(ec echo.Context, v viewer) error {
		return c.failAs(ec, v, http.StatusNotFound, "There is no such page.")
	}))
}

// targetRoutes registers the page and the actions of a queue or a
// subscription (base), which are the same.
func (c *Console) targetRoutes(g *echo.Group, base string) {
	g.GET(base, c.signedIn(c.targetPage))
	for _, a := range targetActions {
		g.POST(base+"/"+a.name, c.signedIn(c.changes(c.targetAction(a))))
	}
}

// secure sets the headers every console answer carries: a strict
// Content-Security-Policy (no script, no frames, forms to the console
// only), no framing, no sniffing, no referrer to other sites, no caching.
func (c *Console) secure(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		h := ec.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin") // not no-referrer: with it, browsers send Origin: null on forms
		h.Set("Cache-Control", "no-store")
		// A console form is a few fields: a larger body is not parsed (its
		// form then has no CSRF token, and is refused). One up to
		// drainFormBytes is read and dropped first, so that its sender
		// gets the error page rather than a connection reset mid-send.
		req := ec.Request()
		if req.ContentLength > maxFormBytes && req.ContentLength <= drainFormBytes {
			_, _ = io.Copy(io.Discard, io.LimitReader(req.Body, drainFormBytes))
			req.Body, req.ContentLength = http.NoBody, 0
		}
		req.Body = http.MaxBytesReader(ec.Response(), req.Body, maxFormBytes)
		return next(ec)
	}
}

// maxFormBytes bounds the body of a console request; drainFormBytes
// bounds what is read of a larger one before its error page.
const (
	maxFormBytes   = 64 << 10
	drainFormBytes = 1 << 20
)

// viewer is who a signed-in request comes from.
type viewer struct {
	key     access.Key
	session session
}

// signedIn runs next for a request with a valid session whose key still
// works (resolved by id on every request, through the key cache), and
// sends any other to the sign-in page.
func (c *Console) signedIn(next func(echo.Context, viewer) error) echo.HandlerFunc {
	return func(ec echo.Context) error {
		ck, err := ec.Cookie(cookieName)
		if err != nil {
			return c.toLogin(ec)
		}
		s, err := c.open(ck.Value, time.Now())
		if err != nil {
			return c.toLogin(ec)
		}
		key, err := c.keyByID(ec.Request().Context(), s.KeyID)
		switch {
		case errors.Is(err, access.ErrInvalidKey):
			return c.toLogin(ec)
		case err != nil:
			c.log.Error("console: key lookup failed", "error", err)
			return c.fail(ec, http.StatusServiceUnavailable, "The database did not answer; try again.")
		case key.Expired(time.Now()):
			return c.toLogin(ec)
		}
		return next(ec, viewer{key: key, session: s})
	}
}

// toLogin ends the request's session and sends it to the sign-in page.
func (c *Console) toLogin(ec echo.Context) error {
	ec.SetCookie(c.sessionCookie(ec.Request(), "", time.Time{}))
	if ec.Request().Method != http.MethodGet {
		return c.fail(ec, http.StatusUnauthorized, "Your session has ended (signed out, or the key was revoked or expired). Sign in again.")
	}
	return ec.Redirect(http.StatusSeeOther, "/ui/login")
}

// changes runs next only for a form whose CSRF token is the session's and
// which comes from the console's own origin.
func (c *Console) changes(next func(echo.Context, viewer) error) func(echo.Context, viewer) error {
	return func(ec echo.Context, v viewer) error {
		if !c.sameOrigin(ec.Request()) || !c.csrfValid(v.session, ec.FormValue("csrf")) {
			return c.fail(ec, http.StatusForbidden, "This form is not valid (its CSRF token is missing or wrong). Reload the page and try again.")
		}
		return next(ec, v)
	}
}

// sameOrigin reports whether a form's request did not come from another
// site: its Origin, when it sends one, names the request's own host, or
// the host of the console's public URL (a proxy in front may change Host).
func (c *Console) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Host == r.Host || (c.public.Host != "" && u.Scheme == c.public.Scheme && u.Host == c.public.Host))
}

// apiResult is a REST answer to an in-process call.
type apiResult struct {
	Status int
	Body   []byte
}

// problemDetail is a REST problem's detail, or its status text.
func (r apiResult) problemDetail() string {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(r.Body, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return http.StatusText(r.Status)
}

// call makes the REST request method path (with a JSON body unless nil)
// in-process for v's key, exactly as the key's own request would be made.
func (c *Console) call(ec echo.Context, v viewer, method, path string, body any) apiResult {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(handlers.WithKey(ec.Request().Context(), v.key), method, path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.RemoteAddr = ec.Request().RemoteAddr
	if id := ec.Response().Header().Get(echo.HeaderXRequestID); id != "" {
		req.Header.Set(echo.HeaderXRequestID, id)
	}
	w := &recorder{header: http.Header{}}
	c.api.ServeHTTP(w, req)
	return apiResult{Status: w.status, Body: w.body.Bytes()}
}

// get calls GET path and decodes a 200's JSON into out; any other answer
// is returned as an error page's status and text.
func (c *Console) get(ec echo.Context, v viewer, path string, out any) (int, string) {
	r := c.call(ec, v, http.MethodGet, path, nil)
	if r.Status != http.StatusOK {
		return r.Status, r.problemDetail()
	}
	d := json.NewDecoder(bytes.NewReader(r.Body))
	d.UseNumber()
	if err := d.Decode(out); err != nil {
		c.log.Error("console: undecodable REST answer", "path", path, "error", err)
		return http.StatusInternalServerError, "The answer could not be read."
	}
	return 0, ""
}

// recorder is the ResponseWriter of an in-process REST call.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }
func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
func (w *recorder) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}

// pathEscape escapes one segment of a REST path.
func pathEscape(s string) string { return url.PathEscape(s) }

// trimmed is s without surrounding space, at most n bytes.
func trimmed(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = s[:n]
	}
	return s
}
