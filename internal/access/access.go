// Package access is Ferry's permission model (API.md § Access control):
// resources, actions, what implies what, the permissions a scoped key
// carries, and the [Resolver] that turns a Bearer secret into a [Key].
//
// A permission names a resource by kind and glob — queue:<glob>,
// topic:<glob>, subscription:<topic glob>/<sub glob>,
// group:<topic glob>/<group glob>, or admin — and the actions it grants
// there. `*` in a glob matches any run of name characters (also none); a
// glob always matches a whole name, never part of one. Implications:
//
//   - "*" grants every action of the resource;
//   - manage implies read (every kind);
//   - group manage implies consume;
//   - topic manage (or "*" on a topic) implies every action on the topic's
//     subscriptions and groups;
//   - manage never implies send, receive or publish.
//
// The bootstrap admin key (Key.Admin) has every permission.
package access

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Kind is the kind of a resource.
type Kind string

// The kinds of resource.
const (
	Queue        Kind = "queue"
	Topic        Kind = "topic"
	Subscription Kind = "subscription"
	Group        Kind = "group"
	// Admin is keys and the audit log; its only action is All.
	Admin Kind = "admin"
)

// Action is what a key may do on a resource.
type Action string

// The actions; which belong to which kind is in kindActions.
const (
	Send    Action = "send"
	Receive Action = "receive"
	Read    Action = "read"
	Manage  Action = "manage"
	Publish Action = "publish"
	Consume Action = "consume"
	// All grants every action of the resource.
	All Action = "*"
)

// kindActions lists the actions of each kind (All aside), in API.md's order.
var kindActions = map[Kind][]Action{ //nolint:gochecknoglobals // a read-only table, read on every permission check
	Queue:        {Send, Receive, Read, Manage},
	Topic:        {Publish, Read, Manage},
	Subscription: {Receive, Read, Manage},
	Group:        {Consume, Read, Manage},
	Admin:        {},
}

// Actions returns the actions of kind (without [All]), nil for an unknown
// kind.
func Actions(k Kind) []Action { return slices.Clone(kindActions[k]) }

// nested reports whether resources of kind k live in a topic, so that
// their names are "<topic>/<name>".
func nested(k Kind) bool { return k == Subscription || k == Group }

// Permission is one missing or granted permission: an action on one named
// resource. Its String is how 403 problems name it: "queue:orders send",
// "subscription:orders/billing receive", "admin".
type Permission struct {
	Kind   Kind
	Name   string // "topic/sub" for subscriptions and groups; "" for admin
	Action Action
}

func (p Permission) String() string {
	if p.Kind == Admin {
		return string(Admin)
	}
	return fmt.Sprintf("%s:%s %s", p.Kind, p.Name, p.Action)
}

// Grant is one parsed permission of a key: actions on the resources its
// globs match.
type Grant struct {
	// Resource is the resource as given ("queue:billing-*").
	Resource string
	Kind     Kind
	// Topic is the topic glob of subscriptions and groups; Name the glob
	// of the resource itself ("" for admin).
	Topic, Name string
	Actions     []Action
}

// Key is who a request comes from and what it may do.
type Key struct {
	ID   string
	Name string
	// Admin is the bootstrap key (FERRY_ADMIN_KEY): every permission.
	Admin  bool
	Grants []Grant
	// ExpiresAt is when the key stops working; zero: never.
	ExpiresAt time.Time
}

// Expired reports whether the key has expired at now.
func (k Key) Expired(now time.Time) bool {
	return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
}

// Allows reports whether the key may do action on the resource of kind
// named name ("topic/sub" for subscriptions, "topic/group" for groups; ""
// for admin).
func (k Key) Allows(kind Kind, name string, action Action) bool {
	if k.Admin {
		return true
	}
	topic, own := name, name
	if nested(kind) {
		var ok bool
		if topic, own, ok = strings.Cut(name, "/"); !ok {
			return false
		}
	}
	for _, g := range k.Grants {
		if g.allows(kind, topic, own, action) {
			return true
		}
	}
	return false
}

// AllowsSome reports whether the key may do action on at least one
// resource of kind (a subscription or group) in the named topic, whatever
// its name: whether a list of the topic's subscriptions or groups can show
// the key anything.
func (k Key) AllowsSome(kind Kind, topic string, action Action) bool {
	if k.Admin {
		return true
	}
	for _, g := range k.Grants {
		if g.Kind == kind && Match(g.Topic, topic) && g.implies(action) {
			return true
		}
		if nested(kind) && g.Kind == Topic && Match(g.Name, topic) && g.implies(Manage) {
			return true
		}
	}
	return false
}

// allows reports whether g grants action on the resource of kind named
// own (in topic, for nested kinds).
func (g Grant) allows(kind Kind, topic, own string, action Action) bool {
	switch {
	case g.Kind == kind && kind == Admin:
		return true
	case g.Kind == kind && nested(kind):
		return Match(g.Topic, topic) && Match(g.Name, own) && g.implies(action)
	case g.Kind == kind:
		return Match(g.Name, own) && g.implies(action)
	case g.Kind == Topic && nested(kind):
		// Topic manage is every action on its subscriptions and groups.
		return Match(g.Name, topic) && g.implies(Manage) && slices.Contains(kindActions[kind], action)
	}
	return false
}

// implies reports whether g's actions include action on g's own kind.
func (g Grant) implies(action Action) bool {
	if !slices.Contains(kindActions[g.Kind], action) {
		return false
	}
	for _, a := range g.Actions {
		switch {
		case a == All, a == action:
			return true
		case a == Manage && action == Read:
			return true
		case a == Manage && action == Consume && g.Kind == Group:
			return true
		}
	}
	return false
}

// Match reports whether the glob matches the whole of name; `*` matches
// any run of characters, also an empty one. Names never contain `*` or
// `/` (they are checked elsewhere), so no character needs escaping.
func Match(glob, name string) bool {
	// Iterative wildcard matching with backtracking to the last star:
	// linear in practice, O(len(glob)·len(name)) at worst.
	g, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case g < len(glob) && glob[g] == '*':
			star, mark = g, n
			g++
		case g < len(glob) && glob[g] == name[n]:
			g++
			n++
		case star >= 0:
			g = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for g < len(glob) && glob[g] == '*' {
		g++
	}
	return g == len(glob)
}
