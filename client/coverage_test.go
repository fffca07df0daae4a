package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// opRecorder names the spec's operation of every request a client sends
// and counts those answered with a 2xx.
type opRecorder struct {
	router routers.Router
	all    []string
	mu     sync.Mutex
	ok     map[string]int
}

func newOpRecorder(t *testing.T) *opRecorder {
	doc, err := openapi.Load()
	require.NoError(t, err)
	doc.Servers = nil
	r, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	rec := &opRecorder{router: r, ok: map[string]int{}}
	for _, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			// HEAD /healthz and /readyz are for load balancers' probes;
			// the client calls their GET, which answers the same.
			if method == http.MethodHead && item.Get != nil {
				continue
			}
			rec.all = append(rec.all, op.OperationID)
		}
	}
	sort.Strings(rec.all)
	return rec
}

func (r *opRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	route, _, rerr := r.router.FindRoute(req)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && rerr == nil && resp.StatusCode < 300 {
		r.mu.Lock()
		r.ok[route.Operation.OperationID]++
		r.mu.Unlock()
	}
	return resp, err
}

// TestEveryOperation drives every operation of openapi/openapi.yaml through
// the client against a real Ferry (requests and answers validated against
// the spec), and fails naming any operation that no call reached with a
// 2xx: a route added to the spec without a client call fails here.
func TestEveryOperation(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.AllowPrivatePush = true })
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	rec := newOpRecorder(t)
	c := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(openapitest.New(t).RequestClient(t, rec)))

	coverQueues(t, c, hook.URL)
	coverTopics(t, c)
	coverSubscriptions(t, c, hook.URL)
	coverGroups(t, c)
	coverKeys(t, c)
	coverOperations(t, c)

	var missing []string
	for _, op := range rec.all {
		if rec.ok[op] == 0 {
			missing = append(missing, op)
		}
	}
	require.Empty(t, missing, "operations of the spec that no client call reached with a 2xx")
	require.Len(t, rec.all, len(rec.ok))
}

func coverOperations(t *testing.T, c *client.Client) {
	ctx := context.Background()
	require.NoError(t, c.Health(ctx))
	require.NoError(t, c.Ready(ctx))
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	require.Contains(t, m, "# TYPE")
	spec, err := c.OpenAPI(ctx)
	require.NoError(t, err)
	require.Contains(t, string(spec), "openapi: 3.")
}
