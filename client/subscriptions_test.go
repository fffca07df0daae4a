package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// coverSubscriptions: a pull subscription's whole life, and push settings.
func coverSubscriptions(t *testing.T, c *client.Client, hook string) {
	ctx := context.Background()
	s, created, err := c.PutSubscription(ctx, "orders", "billing", client.SubscriptionConfig{
		Filter: &client.Filter{Types: []string{"order.*"}}, Start: "earliest", MaxReceives: client.Ptr(5),
	})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, []string{"order.*"}, s.Filter.Types)
	peeked, err := c.PeekSubscription(ctx, "orders", "billing", client.PeekOptions{Limit: 1, State: "available"})
	require.NoError(t, err)
	require.Len(t, peeked.Messages, 1)
	require.Equal(t, "e1", peeked.Messages[0].ID)
	require.Equal(t, "order.created", peeked.Messages[0].Event.Type)
	require.Zero(t, peeked.Messages[0].ReceiveCount)
	require.NotNil(t, peeked.Next, "a second delivery waits")
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
	peeked, err = c.PeekSubscription(ctx, "orders", "billing", client.PeekOptions{})
	require.NoError(t, err)
	require.Len(t, peeked.Messages, 1, "the redriven event waits")
	require.NoError(t, c.PurgeSubscription(ctx, "orders", "billing"))
	peeked, err = c.PeekSubscription(ctx, "orders", "billing", client.PeekOptions{})
	require.NoError(t, err)
	require.Empty(t, peeked.Messages, "purged")
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

// TestSourceFiltersAndPushFormat: a filter's sources and subjects
// round-trip and pick the events delivered (a plain-JSON event has no
// subject, so it matches none); a push subscription's format round-trips
// and is what the hook receives.
func TestSourceFiltersAndPushFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := ferrytest.Start(t, func(c *server.Config) { c.AllowPrivatePush = true })
	c, _ := newClient(t, env.URL)
	types := make(chan string, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		types <- r.Header.Get("Content-Type")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	_, _, err := c.PutTopic(ctx, "t", client.TopicConfig{})
	require.NoError(t, err)
	f := &client.Filter{Sources: []string{"/room-*"}, Subjects: []string{"room-a/*"}}
	s, _, err := c.PutSubscription(ctx, "t", "rooms", client.SubscriptionConfig{Filter: f})
	require.NoError(t, err)
	require.Equal(t, f.Sources, s.Filter.Sources)
	require.Equal(t, f.Subjects, s.Filter.Subjects)
	s, _, err = c.PutSubscription(ctx, "t", "hooked", client.SubscriptionConfig{Push: &client.PushConfig{URL: hook.URL, Format: "cloudevents"}})
	require.NoError(t, err)
	require.Equal(t, "cloudevents", s.Push.Format)

	_, err = c.Publish(ctx, "t", client.PublishEvent{Type: "plain"})
	require.NoError(t, err)
	_, err = c.PublishCloudEventBatch(ctx, "t", []client.CloudEvent{
		{ID: "b", Source: "/room-b", Subject: "room-b/x", Type: "r"},
		{ID: "a", Source: "/room-a", Subject: "room-a/x", Type: "r"},
	})
	require.NoError(t, err)
	ds, err := c.ReceiveEvents(ctx, "t", "rooms", client.Receive{MaxMessages: 10, WaitSeconds: 5})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "a", ds[0].ID)
	require.Equal(t, "room-a/x", *ds[0].Event.Subject)
	for range 3 {
		select {
		case ct := <-types:
			require.Equal(t, "application/cloudevents+json", ct)
		case <-time.After(30 * time.Second):
			t.Fatal("no push within 30s")
		}
	}
}
