package sqs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/metrics"
	"github.com/ferry-mq/ferry/internal/sigv4"
	"github.com/ferry-mq/ferry/store"
)

// AccountID is the account every QueueUrl and QueueArn names.
const AccountID = "000000000000"

// MaxRequestBytes bounds an SQS request's body: a batch of 10 messages
// of 256 KiB at most is 256 KiB of content, whatever the encoding adds.
const MaxRequestBytes = 1 << 20

// KeyFunc looks up an access key id: the secret it signs with and the key
// whose permissions its requests get. An unknown, revoked or expired id
// answers [sigv4.ErrUnknownKey]; any other error is the server's own.
type KeyFunc func(ctx context.Context, accessKeyID string) (secret string, key access.Key, err error)

// orAdmin is k, with the access key id `admin` answered first as the
// bootstrap admin key when adminKey is set.
func (k KeyFunc) orAdmin(adminKey string) KeyFunc {
	return func(ctx context.Context, id string) (string, access.Key, error) {
		if id == access.AdminKeyID && adminKey != "" {
			return adminKey, access.Key{ID: access.AdminKeyID, Name: "FERRY_ADMIN_KEY", Admin: true}, nil
		}
		return k(ctx, id)
	}
}

// Deps is what the SQS face needs: the same engine the REST face uses.
type Deps struct {
	Pool     *pgxpool.Pool
	Sender   *store.Sender
	Queues   *store.QueueCache
	Notifier *store.Notifier
	River    *river.Client[pgx.Tx]
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	// AdminKey is FERRY_ADMIN_KEY: the secret of the access key id admin.
	AdminKey string
	// Keys looks up every other access key id; nil: none (only admin).
	Keys KeyFunc
	// Limits are the REST request limits (a message's size, through
	// [handlers.Limits.CheckMessage]); zero: [handlers.DefaultLimits].
	Limits handlers.Limits
	// PublicURL is the base of QueueUrls (FERRY_PUBLIC_URL); empty: the
	// request's own scheme and Host.
	PublicURL string
	// Stop ends long polls early (server shutdown), and the move tasks.
	Stop <-chan struct{}
	// Background counts the move tasks' goroutines, so that the server's
	// shutdown, which waits for it after Stop, joins them before it closes
	// the pool; nil: a group of the face's own.
	Background *sync.WaitGroup
	// FallbackPoll is how often a long poll checks without a wake-up.
	FallbackPoll time.Duration
	// Now is the clock signatures are checked against; nil: time.Now.
	Now func() time.Time
}

// face serves the SQS API.
type face struct {
	Deps
	// life ends when the server stops (Stop): the move tasks' goroutines
	// run under it.
	life  context.Context
	tasks *moveTasks
}

// Mount registers the SQS API on e: POST / (both protocols) and POST
// /000000000000/<queue> (a QueueUrl, where Query clients post), and the
// same paths by GET (the Query protocol in the query string, presigned
// or header-signed). The REST
// face's middleware (request ids, logs, metrics, body and write
// deadlines) serves it too.
func Mount(e *echo.Echo, d Deps) {
	if d.Limits.MaxBodyBytes == 0 {
		d.Limits = handlers.DefaultLimits()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	keys := d.Keys
	if keys == nil {
		keys = func(context.Context, string) (string, access.Key, error) {
			return "", access.Key{}, sigv4.ErrUnknownKey
		}
	}
	d.Keys = keys.orAdmin(d.AdminKey)
	if d.Background == nil {
		d.Background = new(sync.WaitGroup)
	}
	f := &face{Deps: d, life: context.Background(), tasks: newMoveTasks()}
	if d.Stop != nil {
		life, cancel := context.WithCancel(context.Background())
		go func() {
			<-d.Stop
			cancel()
		}()
		f.life = life
	}
	e.POST("/", f.serve)
	e.POST("/"+AccountID+"/:queue", f.serve)
	// The Query protocol's GET form: the parameters, and a presigned
	// request's signature, in the query string.
	e.GET("/", f.serve)
	e.GET("/"+AccountID+"/:queue", f.serve)
}

// protocol is a request's wire protocol.
type protocol int

const (
	protoQuery protocol = iota
	protoJSON
)

// call is one request as the actions see it.
type call struct {
	c      echo.Context
	ctx    context.Context
	proto  protocol
	action string
	key    access.Key
	keyID  string
	region string
	// resource is the queue whose permission was checked first: the one
	// the request's audit entry names.
	resource string
	body     []byte
	form     *form
}

// serve answers one SQS request, in the protocol it came in.
func (f *face) serve(c echo.Context) error {
	cl := &call{c: c, ctx: c.Request().Context()}
	out, err := f.run(cl)
	f.auditRecord(cl, err)
	if err != nil {
		if reason := authFailure(err); reason != "" && f.Metrics != nil {
			f.Metrics.AuthFailed(reason)
		}
		return f.writeError(cl, err)
	}
	return f.writeResult(cl, out)
}

// authFailure is the ferry_auth_failures_total reason of a refusal for
// the request's key, as the REST face counts its own: a signature that is
// absent or not shaped like SigV4 is "missing" (REST's 401 without a
// Bearer token), an unknown, revoked or expired access key id or a
// signature that does not match (a wrong secret, a stale date) "invalid",
// a valid key without the permission (AccessDenied) "forbidden". Any
// other error is no refusal for the key: "".
func authFailure(err error) string {
	var (
		se *sigv4.Error
		ae *apiError
	)
	switch {
	case errors.As(err, &se) && (se.Code == sigv4.MissingAuthenticationToken || se.Code == sigv4.IncompleteSignature):
		return metrics.AuthMissing
	case errors.As(err, &se):
		return metrics.AuthInvalid
	case errors.As(err, &ae) && ae.Code == codeAccessDenied:
		return metrics.AuthForbidden
	}
	return ""
}

// run reads, authenticates and decodes the request, and runs its action.
func (f *face) run(cl *call) (any, error) {
	req := cl.c.Request()
	if req.Header.Get("X-Amz-Target") != "" {
		cl.proto = protoJSON
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxRequestBytes+1))
	if err != nil {
		return nil, fail(codeInvalidParameter, "The request body could not be read.")
	}
	if len(body) > MaxRequestBytes {
		return nil, fail(codeInvalidParameter, "The request body is larger than %d bytes.", MaxRequestBytes)
	}
	cl.body = body
	// The key is looked up once, by the verifier, after its cheap checks.
	var key access.Key
	v := sigv4.Verifier{Service: "sqs", Secret: func(ctx context.Context, id string) (string, error) {
		secret, k, err := f.Keys(ctx, id)
		if err == nil && k.Expired(time.Now()) {
			return "", sigv4.ErrUnknownKey
		}
		key = k
		return secret, err
	}}
	signed, err := v.Verify(req, body, f.Now())
	if err != nil {
		return nil, err
	}
	cl.key, cl.keyID, cl.region = key, signed.AccessKeyID, signed.Region
	if err := cl.parse(req); err != nil {
		return nil, err
	}
	fn, ok := actionTable[cl.action]
	if !ok {
		if cl.proto == protoJSON {
			return nil, fail(codeUnknownOperation, "The action %s is not valid for this endpoint.", cl.action)
		}
		return nil, fail(codeInvalidAction, "The action %s is not valid for this endpoint.", cl.action)
	}
	return fn(f, cl)
}

// parse finds the request's action and checks its parameters' encoding.
func (cl *call) parse(req *http.Request) error {
	ct, _, _ := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
	if cl.proto == protoJSON {
		target := req.Header.Get("X-Amz-Target")
		action, ok := strings.CutPrefix(target, "AmazonSQS.")
		if !ok || action == "" {
			return fail(codeUnknownOperation, "X-Amz-Target must be AmazonSQS.<Action>, not %q.", target)
		}
		cl.action = action
		if ct != "application/x-amz-json-1.0" && ct != "application/json" {
			return fail(codeSerialization, "The JSON protocol's Content-Type is application/x-amz-json-1.0.")
		}
		trimmed := bytes.TrimSpace(cl.body)
		if len(trimmed) == 0 {
			cl.body = []byte("{}")
		} else if trimmed[0] != '{' || !json.Valid(trimmed) || !utf8.Valid(trimmed) {
			return fail(codeSerialization, "The request body is not a JSON object.")
		}
		return nil
	}
	if ct != "" && ct != "application/x-www-form-urlencoded" {
		return fail(codeMalformedQuery, "The Query protocol's Content-Type is application/x-www-form-urlencoded.")
	}
	vals, err := url.ParseQuery(string(cl.body))
	if err != nil || !utf8.Valid(cl.body) {
		return fail(codeMalformedQuery, "The request body is not valid form encoding.")
	}
	query, _ := url.ParseQuery(req.URL.RawQuery) // the verifier parsed it already
	for k, vs := range query {
		if !strings.HasPrefix(k, "X-Amz-") {
			vals[k] = append(vals[k], vs...)
		}
	}
	for k, vs := range vals {
		if len(vs) > 1 {
			return fail(codeMalformedQuery, "The parameter %s is given more than once.", k)
		}
	}
	cl.form = newForm(vals)
	cl.action, _ = cl.form.get("Action")
	if cl.action == "" {
		return missingParam("Action")
	}
	return nil
}

// decode reads the request's parameters into the struct dst points to.
func (cl *call) decode(dst any) error {
	if cl.proto == protoQuery {
		return decodeForm(cl.form, "", reflect.ValueOf(dst).Elem())
	}
	if err := json.Unmarshal(cl.body, dst); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return fail(codeSerialization, "The member %s must be %s, not %s.", typ.Field, typ.Type, typ.Value)
		}
		return fail(codeSerialization, "The request body is not valid JSON for %s.", cl.action)
	}
	return nil
}

// permit checks that the request's key may do action on the named queue:
// before the queue is looked up, so that a refusal tells no names.
func (cl *call) permit(queue string, action access.Action) error {
	if cl.resource == "" {
		cl.resource = queue
	}
	if cl.key.Allows(access.Queue, queue, action) {
		return nil
	}
	return failWith(http.StatusForbidden, codeAccessDenied,
		"Access to the resource %s is denied: the key %s lacks the permission %s.",
		queue, cl.keyID, access.Permission{Kind: access.Queue, Name: queue, Action: action})
}
