package access_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/access"
)

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec  access.Spec
		field string
		has   string
	}{
		{spec("bucket:x", "read"), "resource", `"bucket:x": unknown resource`},
		{spec("queue", "read"), "resource", "unknown resource"},
		{spec("admin:x", "*"), "resource", "unknown resource"},
		{spec("queue:", "read"), "resource", `queue glob ""`},
		{spec("queue:.x", "read"), "resource", `queue glob ".x"`},
		{spec("queue:a/b", "read"), "resource", `queue glob "a/b"`},
		{spec("queue:a b", "read"), "resource", `queue glob "a b"`},
		{spec("topic:a?", "read"), "resource", `topic glob "a?"`},
		{spec("subscription:orders", "read"), "resource", "<topic glob>/<subscription glob>"},
		{spec("subscription:/x", "read"), "resource", `topic glob ""`},
		{spec("subscription:x/", "read"), "resource", `subscription glob ""`},
		{spec("group:x/y/z", "read"), "resource", `group glob "y/z"`},
		{spec("queue:x", "publish"), "actions", `unknown action "publish" for queue (it takes send, receive, read, manage, *)`},
		{spec("topic:x", "receive"), "actions", `unknown action "receive" for topic`},
		{spec("subscription:t/s", "consume"), "actions", `unknown action "consume" for subscription`},
		{spec("group:t/g", "receive"), "actions", `unknown action "receive" for group`},
		{spec("admin", "read"), "actions", `unknown action "read" for admin (it takes *)`},
		{spec("queue:x"), "actions", "queue:x: at least one action is required"},
		{spec("queue:x", "READ"), "actions", `unknown action "READ"`},
	} {
		_, err := access.Parse([]access.Spec{spec("queue:ok", "read"), tc.spec})
		var se *access.SpecError
		require.ErrorAs(t, err, &se, "%+v", tc.spec)
		require.Equal(t, 1, se.Index, "%+v", tc.spec)
		require.Equal(t, tc.field, se.Field, "%+v", tc.spec)
		require.Contains(t, se.Error(), "permissions[1]."+tc.field)
		require.Contains(t, se.Message, tc.has)
	}
	g, err := access.Parse([]access.Spec{spec("admin", "*"), spec("group:*/*", "consume", "*"), spec("queue:a.b_c-d*", "read")})
	require.NoError(t, err)
	require.Equal(t, access.Grant{Resource: "group:*/*", Kind: access.Group, Topic: "*", Name: "*", Actions: []access.Action{access.Consume, access.All}}, g[1])
	g, err = access.Parse(nil)
	require.NoError(t, err)
	require.Empty(t, g)
}
