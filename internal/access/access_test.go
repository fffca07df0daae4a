package access_test

import (
	"math/rand"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/access"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		glob, name string
		want       bool
	}{
		{"orders", "orders", true},
		{"orders", "order", false},
		{"orders", "orders2", false},
		{"*", "a", true},
		{"*", "a.b-c_d", true},
		{"*", "", true},
		{"bill*", "bill", true}, // the run may be empty
		{"bill*", "billing", true},
		{"bill*", "xbilling", false}, // never a partial name
		{"*ing", "billing", true},
		{"*ing", "billingx", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "a1b2c", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "acb", false},
		{"a*b*c", "abcd", false},
		{"a*b*c", "ab", false},
		{"a**c", "ac", true},
		{"team.*-prod", "team.billing-prod", true},
		{"team.*-prod", "team-billing-prod", false}, // dots are literal
		{"team.*-prod", "team.billing_prod", false}, // dashes are literal
		{"q.1", "q.1", true},
		{"q.1", "qx1", false},
		{"*a", "aaaa", true},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"Orders", "orders", false}, // case matters
	} {
		require.Equal(t, tc.want, access.Match(tc.glob, tc.name), "%q ~ %q", tc.glob, tc.name)
	}
}

// key parses the permissions of a test key; they must parse.
func key(t *testing.T, specs ...access.Spec) access.Key {
	t.Helper()
	g, err := access.Parse(specs)
	require.NoError(t, err)
	return access.Key{ID: "k1", Name: "test", Grants: g}
}

func spec(resource string, actions ...string) access.Spec {
	return access.Spec{Resource: resource, Actions: actions}
}

type check struct {
	kind   access.Kind
	name   string
	action access.Action
	want   bool
}

func requireChecks(t *testing.T, k access.Key, checks []check) {
	t.Helper()
	for _, c := range checks {
		require.Equal(t, c.want, k.Allows(c.kind, c.name, c.action), "%s", access.Permission{Kind: c.kind, Name: c.name, Action: c.action})
	}
}

func TestQueueActions(t *testing.T) {
	t.Parallel()
	requireChecks(t, key(t, spec("queue:billing-*", "send", "receive")), []check{
		{access.Queue, "billing-eu", access.Send, true},
		{access.Queue, "billing-eu", access.Receive, true},
		{access.Queue, "billing-eu", access.Read, false}, // send/receive imply nothing
		{access.Queue, "billing-eu", access.Manage, false},
		{access.Queue, "xbilling-eu", access.Send, false},
		{access.Queue, "billing", access.Send, false},
		// A queue glob never names a topic, subscription or group.
		{access.Topic, "billing-eu", access.Publish, false},
		{access.Subscription, "billing-eu/billing-eu", access.Receive, false},
		{access.Group, "billing-eu/billing-eu", access.Consume, false},
	})
	requireChecks(t, key(t, spec("queue:orders", "manage")), []check{
		{access.Queue, "orders", access.Manage, true},
		{access.Queue, "orders", access.Read, true}, // manage implies read
		{access.Queue, "orders", access.Send, false},
		{access.Queue, "orders", access.Receive, false},
		{access.Queue, "orders2", access.Read, false},
	})
	requireChecks(t, key(t, spec("queue:orders", "read")), []check{
		{access.Queue, "orders", access.Read, true},
		{access.Queue, "orders", access.Manage, false}, // read implies nothing
		{access.Queue, "orders", access.Send, false},
	})
	requireChecks(t, key(t, spec("queue:*", "*")), []check{
		{access.Queue, "any.thing", access.Send, true},
		{access.Queue, "any.thing", access.Receive, true},
		{access.Queue, "any.thing", access.Read, true},
		{access.Queue, "any.thing", access.Manage, true},
		{access.Topic, "any.thing", access.Read, false},
		{access.Queue, "x", access.Publish, false}, // not a queue action at all
		{access.Admin, "", access.All, false},
	})
}

func TestTopicActions(t *testing.T) {
	t.Parallel()
	requireChecks(t, key(t, spec("topic:orders", "publish")), []check{
		{access.Topic, "orders", access.Publish, true},
		{access.Topic, "orders", access.Read, false},
		{access.Subscription, "orders/billing", access.Read, false},
		{access.Queue, "orders", access.Send, false},
	})
	requireChecks(t, key(t, spec("topic:orders", "read")), []check{
		{access.Topic, "orders", access.Read, true},
		{access.Topic, "orders", access.Manage, false},
		// topic read is not read of its subscriptions or groups
		{access.Subscription, "orders/billing", access.Read, false},
		{access.Group, "orders/billing", access.Read, false},
	})
	manage := []check{
		{access.Topic, "orders", access.Manage, true},
		{access.Topic, "orders", access.Read, true},
		{access.Topic, "orders", access.Publish, false}, // manage never implies publish
		// topic manage is every action on its subscriptions and groups
		{access.Subscription, "orders/billing", access.Receive, true},
		{access.Subscription, "orders/billing", access.Read, true},
		{access.Subscription, "orders/billing", access.Manage, true},
		{access.Group, "orders/g1", access.Consume, true},
		{access.Group, "orders/g1", access.Read, true},
		{access.Group, "orders/g1", access.Manage, true},
		{access.Subscription, "orders2/billing", access.Receive, false},
		{access.Group, "orders2/g1", access.Consume, false},
		{access.Queue, "orders", access.Read, false},
		{access.Subscription, "orders/billing", access.Send, false}, // not a subscription action
	}
	requireChecks(t, key(t, spec("topic:orders", "manage")), manage)
	requireChecks(t, key(t, spec("topic:orders", "*")), append(manage[:2:2],
		check{access.Topic, "orders", access.Publish, true},
		check{access.Subscription, "orders/billing", access.Receive, true},
		check{access.Group, "orders/g1", access.Manage, true}))
}

func TestSubscriptionActions(t *testing.T) {
	t.Parallel()
	requireChecks(t, key(t, spec("subscription:orders/billing", "receive")), []check{
		{access.Subscription, "orders/billing", access.Receive, true},
		{access.Subscription, "orders/billing", access.Read, false},
		{access.Subscription, "orders/billing2", access.Receive, false},
		{access.Subscription, "orders2/billing", access.Receive, false},
		// a subscription glob never matches a queue, the topic or a group
		{access.Queue, "billing", access.Receive, false},
		{access.Queue, "orders/billing", access.Receive, false},
		{access.Topic, "orders", access.Read, false},
		{access.Group, "orders/billing", access.Consume, false},
	})
	requireChecks(t, key(t, spec("subscription:*/audit-*", "manage")), []check{
		{access.Subscription, "orders/audit-eu", access.Manage, true},
		{access.Subscription, "payments/audit-", access.Read, true},
		{access.Subscription, "orders/audit-eu", access.Receive, false}, // manage never implies receive
		{access.Subscription, "orders/xaudit-eu", access.Read, false},
		{access.Topic, "orders", access.Manage, false},
		// the topic glob does not reach across the slash
		{access.Subscription, "orders/x/audit-eu", access.Read, false},
		{access.Subscription, "ordersaudit-eu", access.Read, false},
	})
}

func TestGroupActions(t *testing.T) {
	t.Parallel()
	requireChecks(t, key(t, spec("group:orders/workers", "manage")), []check{
		{access.Group, "orders/workers", access.Manage, true},
		{access.Group, "orders/workers", access.Read, true},    // manage implies read
		{access.Group, "orders/workers", access.Consume, true}, // and consume
		{access.Subscription, "orders/workers", access.Receive, false},
		{access.Topic, "orders", access.Read, false},
	})
	requireChecks(t, key(t, spec("group:orders/workers", "consume")), []check{
		{access.Group, "orders/workers", access.Consume, true},
		{access.Group, "orders/workers", access.Read, false},
		{access.Group, "orders/workers", access.Manage, false},
	})
	// subscription manage implies read only, never receive (unlike a group's consume)
	requireChecks(t, key(t, spec("subscription:orders/workers", "manage")), []check{
		{access.Subscription, "orders/workers", access.Receive, false},
		{access.Group, "orders/workers", access.Consume, false},
	})
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	requireChecks(t, key(t, spec("admin", "*")), []check{
		{access.Admin, "", access.All, true},
		{access.Queue, "orders", access.Read, false}, // admin is keys and audit only
		{access.Topic, "orders", access.Manage, false},
	})
	requireChecks(t, key(t, spec("queue:*", "*"), spec("topic:*", "*")), []check{
		{access.Admin, "", access.All, false},
	})
	root := access.Key{Admin: true}
	requireChecks(t, root, []check{
		{access.Admin, "", access.All, true},
		{access.Queue, "x", access.Send, true},
		{access.Subscription, "t/s", access.Receive, true},
		{access.Group, "t/g", access.Manage, true},
	})
	require.True(t, root.AllowsSome(access.Group, "t", access.Read))
}

func TestGrantsAddUp(t *testing.T) {
	t.Parallel()
	k := key(t, spec("queue:a", "send"), spec("queue:a*", "read"), spec("subscription:t/s", "read", "read"))
	requireChecks(t, k, []check{
		{access.Queue, "a", access.Send, true},
		{access.Queue, "a", access.Read, true},
		{access.Queue, "ab", access.Send, false},
		{access.Queue, "ab", access.Read, true},
		{access.Subscription, "t/s", access.Read, true},
	})
	require.Equal(t, []string{"read"}, access.Specs(k.Grants)[2].Actions, "duplicate actions are kept once")
	var none access.Key
	require.False(t, none.Allows(access.Queue, "a", access.Read), "a key with no grants may do nothing")
	require.False(t, k.Allows(access.Subscription, "no-slash", access.Read))
}

func TestAllowsSome(t *testing.T) {
	t.Parallel()
	k := key(t, spec("subscription:orders/billing", "read"), spec("group:pay*/w", "consume"), spec("topic:audit", "manage"))
	require.True(t, k.AllowsSome(access.Subscription, "orders", access.Read))
	require.False(t, k.AllowsSome(access.Subscription, "orders", access.Manage))
	require.False(t, k.AllowsSome(access.Subscription, "orders2", access.Read))
	require.False(t, k.AllowsSome(access.Group, "orders", access.Read))
	require.True(t, k.AllowsSome(access.Group, "payments", access.Consume))
	require.False(t, k.AllowsSome(access.Group, "payments", access.Read))
	require.True(t, k.AllowsSome(access.Group, "audit", access.Read), "topic manage reaches its groups")
	require.True(t, k.AllowsSome(access.Subscription, "audit", access.Read))
}

func TestPermissionString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "queue:orders send", access.Permission{Kind: access.Queue, Name: "orders", Action: access.Send}.String())
	require.Equal(t, "subscription:orders/billing receive", access.Permission{Kind: access.Subscription, Name: "orders/billing", Action: access.Receive}.String())
	require.Equal(t, "admin", access.Permission{Kind: access.Admin, Action: access.All}.String())
}

func TestExpired(t *testing.T) {
	t.Parallel()
	now := time.Now()
	require.False(t, access.Key{}.Expired(now))
	require.False(t, access.Key{ExpiresAt: now.Add(time.Second)}.Expired(now))
	require.True(t, access.Key{ExpiresAt: now}.Expired(now))
}

func TestMatchAgainstRegexp(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(1))
	alpha := "ab*."
	for i := 0; i < 200000; i++ {
		var g, n strings.Builder
		for j := r.Intn(7); j > 0; j-- {
			g.WriteByte(alpha[r.Intn(len(alpha))])
		}
		for j := r.Intn(8); j > 0; j-- {
			n.WriteByte("ab."[r.Intn(3)])
		}
		parts := strings.Split(g.String(), "*")
		for k := range parts {
			parts[k] = regexp.QuoteMeta(parts[k])
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		if got, want := access.Match(g.String(), n.String()), re.MatchString(n.String()); got != want {
			t.Fatalf("Match(%q, %q) = %v, want %v", g.String(), n.String(), got, want)
		}
	}
}
