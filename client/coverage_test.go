package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

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

// coverQueues: the queue routes the queue tests leave out (move, push).
func coverQueues(t *testing.T, c *client.Client, hook string) {
	ctx := context.Background()
	putQueue(t, c, "src", client.QueueConfig{})
	putQueue(t, c, "dst", client.QueueConfig{})
	send(t, c, "src", "a")
	send(t, c, "src", "b")
	moved, err := c.MoveMessages(ctx, "src", "dst", 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, moved)
	require.EqualValues(t, 2, stats(t, c, "dst").Available)

	q, created, err := c.PutQueue(ctx, "hooked", client.QueueConfig{Push: &client.PushConfig{URL: hook + "/q"}})
	require.NoError(t, err)
	require.True(t, created)
	require.True(t, strings.HasPrefix(q.SigningSecret, "whsec_"))
	require.Equal(t, hook+"/q", q.Push.URL)
	rot, err := c.RotateQueueSecret(ctx, "hooked")
	require.NoError(t, err)
	require.NotEqual(t, q.SigningSecret, rot.SigningSecret)
	require.True(t, rot.PreviousSecretExpires.After(time.Now()))
	require.NoError(t, c.EnableQueuePush(ctx, "hooked"))
	send(t, c, "hooked", "pushed")
	require.Eventually(t, func() bool {
		as, err := c.ListQueuePushAttempts(ctx, "hooked", client.Attempts{Status: "succeeded"})
		require.NoError(t, err)
		return len(as) == 1 && as[0].StatusCode != nil && *as[0].StatusCode == http.StatusNoContent
	}, 15*time.Second, 20*time.Millisecond)

	q, _, err = c.PutQueue(ctx, "hooked", client.QueueConfig{RemovePush: true, DeadLetterQueue: client.Ptr("dst")})
	require.NoError(t, err)
	require.Nil(t, q.Push)
	require.Equal(t, "dst", *q.DeadLetterQueue)
	q, _, err = c.PutQueue(ctx, "hooked", client.QueueConfig{DeadLetterQueue: client.Ptr("")})
	require.NoError(t, err)
	require.Nil(t, q.DeadLetterQueue)
	ms, err := c.Receive(ctx, "dst", client.Receive{MaxMessages: 1})
	require.NoError(t, err)
	_, err = c.Extend(ctx, "dst", time.Minute, ms[0].Receipt)
	require.NoError(t, err)
	_, err = c.Nack(ctx, "dst", client.Nack{DeadLetter: true}, ms[0].Receipt)
	require.NoError(t, err)
	dl, err := c.ListDeadLetters(ctx, "dst", client.Page{})
	require.NoError(t, err)
	require.Len(t, dl.Messages, 1)
	n, err := c.RedriveDeadLetters(ctx, "dst", client.Redrive{IDs: []string{dl.Messages[0].ID}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, c.PurgeDeadLetters(ctx, "dst"))
	ms, err = c.Receive(ctx, "dst", client.Receive{MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, ms, 2)
	res, err := c.Ack(ctx, "dst", ms[0].Receipt)
	require.NoError(t, err)
	require.Equal(t, "ok", res[0].Status)
	require.NoError(t, c.PurgeQueue(ctx, "dst"))
	require.Equal(t, client.QueueStats{}, stats(t, c, "dst"))
	l, err := c.ListQueues(ctx, client.Page{})
	require.NoError(t, err)
	require.Len(t, l.Queues, 3)
	require.NoError(t, c.DeleteQueue(ctx, "src"))
}

// coverTopics: topics, publish and read.
func coverTopics(t *testing.T, c *client.Client) {
	ctx := context.Background()
	tp, created, err := c.PutTopic(ctx, "orders", client.TopicConfig{Partitions: client.Ptr(2)})
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, tp.Offsets, 2)
	_, _, err = c.PutTopic(ctx, "gone", client.TopicConfig{})
	require.NoError(t, err)
	l, err := c.ListTopics(ctx, client.Page{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "gone", l.Topics[0].Name)
	require.NotNil(t, l.Next)
	require.NoError(t, c.DeleteTopic(ctx, "gone"))

	pub, err := c.Publish(ctx, "orders",
		client.PublishEvent{Type: "order.created", ID: "e1", Key: "k", Data: map[string]any{"n": 1}, Attributes: map[string]string{"region": "eu"}},
		client.PublishEvent{Type: "order.created", ID: "e1", Key: "k"},
		client.PublishEvent{Type: "order.paid", Key: "k"})
	require.NoError(t, err)
	require.Len(t, pub, 3)
	require.True(t, pub[1].Duplicate)
	require.Equal(t, pub[0].Offset+1, pub[2].Offset)
	page, err := c.ReadEvents(ctx, "orders", client.ReadEvents{Partition: pub[0].Partition, FromOffset: pub[0].Offset, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
	require.Equal(t, "e1", page.Events[0].ID)
	require.JSONEq(t, `{"n":1}`, string(page.Events[0].Data))
	require.Equal(t, pub[2].Offset+1, page.NextOffset)
	page, err = c.ReadEvents(ctx, "orders", client.ReadEvents{Partition: pub[0].Partition, FromTime: page.Events[1].PublishedAt})
	require.NoError(t, err)
	require.Equal(t, "order.paid", page.Events[0].Type)
	tp, err = c.GetTopic(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, pub[2].Offset, tp.Offsets[pub[0].Partition].HeadOffset)
}

// coverSubscriptions: a pull subscription's whole life, and push settings.
func coverSubscriptions(t *testing.T, c *client.Client, hook string) {
	ctx := context.Background()
	s, created, err := c.PutSubscription(ctx, "orders", "billing", client.SubscriptionConfig{
		Filter: &client.Filter{Types: []string{"order.*"}}, Start: "earliest", MaxReceives: client.Ptr(5),
	})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, []string{"order.*"}, s.Filter.Types)
	ds, err := c.ReceiveEvents(ctx, "orders", "billing", client.Receive{MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, ds, 2)
	require.Equal(t, "e1", ds[0].ID)
	require.Equal(t, "order.created", ds[0].Event.Type)
	_, err = c.ExtendEvents(ctx, "orders", "billing", time.Minute, ds[0].Receipt)
	require.NoError(t, err)
	res, err := c.AckEvents(ctx, "orders", "billing", ds[0].Receipt)
	require.NoError(t, err)
	require.Equal(t, "ok", res[0].Status)
	_, err = c.NackEvents(ctx, "orders", "billing", client.Nack{DeadLetter: true, Error: "poison"}, ds[1].Receipt)
	require.NoError(t, err)
	dl, err := c.ListSubscriptionDeadLetters(ctx, "orders", "billing", client.Page{})
	require.NoError(t, err)
	require.Len(t, dl.Messages, 1)
	require.Equal(t, "poison", *dl.Messages[0].LastError)
	n, err := c.RedriveSubscriptionDeadLetters(ctx, "orders", "billing", client.Redrive{IDs: []string{dl.Messages[0].ID}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, c.PurgeSubscriptionDeadLetters(ctx, "orders", "billing"))
	require.NoError(t, c.SeekSubscription(ctx, "orders", "billing", "latest"))
	got, err := c.GetSubscription(ctx, "orders", "billing")
	require.NoError(t, err)
	require.Equal(t, 5, got.MaxReceives)

	s, _, err = c.PutSubscription(ctx, "orders", "hooked", client.SubscriptionConfig{Push: &client.PushConfig{URL: hook + "/s"}})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(s.SigningSecret, "whsec_"))
	rot, err := c.RotateSubscriptionSecret(ctx, "orders", "hooked")
	require.NoError(t, err)
	require.NotEqual(t, s.SigningSecret, rot.SigningSecret)
	require.NoError(t, c.EnableSubscriptionPush(ctx, "orders", "hooked"))
	as, err := c.ListSubscriptionPushAttempts(ctx, "orders", "hooked", client.Attempts{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, as, "no event was published since it was made")
	l, err := c.ListSubscriptions(ctx, "orders", client.Page{})
	require.NoError(t, err)
	require.Len(t, l.Subscriptions, 2)
	require.NoError(t, c.DeleteSubscription(ctx, "orders", "hooked"))
}

// coverGroups: poll, commit, seek, leave, describe, delete.
func coverGroups(t *testing.T, c *client.Client) {
	ctx := context.Background()
	p, err := c.PollGroup(ctx, "orders", "g", client.Poll{Consumer: "w1", Start: "earliest", MaxEvents: 10})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, p.Partitions)
	require.Len(t, p.Events, 2)
	last := p.Events[len(p.Events)-1]
	require.NoError(t, c.CommitGroup(ctx, "orders", "g", "w1", p.Generation, map[int]int64{last.Partition: last.Offset}))
	err = c.CommitGroup(ctx, "orders", "g", "w1", p.Generation+1, map[int]int64{last.Partition: last.Offset})
	require.True(t, client.IsCode(err, "conflict"), "a commit naming another generation is fenced: %v", err)
	g, err := c.GetGroup(ctx, "orders", "g")
	require.NoError(t, err)
	require.Equal(t, last.Offset, g.Partitions[last.Partition].CommittedOffset)
	require.Equal(t, "w1", g.Members[0].Consumer)
	require.NoError(t, c.SeekGroup(ctx, "orders", "g", client.GroupSeek{Offsets: map[int]int64{last.Partition: 0}}))
	require.NoError(t, c.SeekGroup(ctx, "orders", "g", client.GroupSeek{To: "earliest"}))
	require.NoError(t, c.LeaveGroup(ctx, "orders", "g", "w1"))
	l, err := c.ListGroups(ctx, "orders", client.Page{})
	require.NoError(t, err)
	require.Len(t, l.Groups, 1)
	require.Empty(t, l.Groups[0].Members)
	require.NoError(t, c.DeleteGroup(ctx, "orders", "g"))
}

// coverKeys: keys, the audit log and the operations routes.
func coverKeys(t *testing.T, c *client.Client) {
	ctx := context.Background()
	k, err := c.CreateKey(ctx, client.KeyRequest{Name: "worker", Permissions: []client.Permission{{Resource: "queue:dst", Actions: []string{"receive"}}}})
	require.NoError(t, err)
	require.NotEmpty(t, k.Secret)
	got, err := c.GetKey(ctx, k.ID)
	require.NoError(t, err)
	require.Empty(t, got.Secret, "the secret is shown once")
	require.Equal(t, "worker", got.Name)
	l, err := c.ListKeys(ctx, client.Page{})
	require.NoError(t, err)
	require.Len(t, l.Keys, 1)
	require.NoError(t, c.DeleteKey(ctx, k.ID))
	_, err = c.GetKey(ctx, k.ID)
	require.True(t, client.IsCode(err, "not_found"), "%v", err)
	a, err := c.ListAuditLog(ctx, client.Page{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "key.delete", a.Entries[0].Action)
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
